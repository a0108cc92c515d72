//! cargo-fuzz target `policy_load`: the invariants live in `fuzz/checks/policy_load.rs`, shared with the
//! corpus replay test.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::policy_load::run(data));
