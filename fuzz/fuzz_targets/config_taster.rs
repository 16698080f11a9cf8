//! Fuzz target `config_taster`: see `steerdns_fuzz::config_taster` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| steerdns_fuzz::config_taster(data));
