//! Fuzz target `ecs_edns`: see `steerdns_fuzz::ecs_edns` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| steerdns_fuzz::ecs_edns(data));
