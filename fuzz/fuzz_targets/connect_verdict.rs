//! cargo-fuzz target `connect_verdict`: the invariants live in `fuzz/checks/connect_verdict.rs`, shared with the
//! corpus replay test.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::connect_verdict::run(data));
