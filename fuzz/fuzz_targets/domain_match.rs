//! cargo-fuzz target `domain_match`: the invariants live in `fuzz/checks/domain_match.rs`, shared with the
//! corpus replay test.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::domain_match::run(data));
