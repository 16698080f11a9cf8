//! Fuzz target `load_feed`: see `steerdns_fuzz::load_feed` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| steerdns_fuzz::load_feed(data));
