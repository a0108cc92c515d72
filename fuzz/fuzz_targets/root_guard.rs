//! cargo-fuzz target `root_guard`: the invariants live in `fuzz/checks/root_guard.rs`, shared with the
//! corpus replay test.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::root_guard::run(data));
