//! Fuzz target `zone_file`: see `steerdns_fuzz::zone_file` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| steerdns_fuzz::zone_file(data));
