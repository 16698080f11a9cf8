//! Tests of the library alone, no process started: properties of the answer path, the shield
//! simulator's scenarios, and the fuzz targets replayed on their regression inputs.
//!
//! One test binary per group (issue 29 item 6): every binary links the whole library, so a
//! binary per file cost a link each. Each file is a module; the shared helpers are declared
//! once here.

mod fuzz_regressions;
mod properties;
mod shield_scenarios;
