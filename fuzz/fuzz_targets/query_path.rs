//! Fuzz target `query_path`: see `steerdns_fuzz::query_path` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| steerdns_fuzz::query_path(data));
