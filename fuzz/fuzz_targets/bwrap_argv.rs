//! cargo-fuzz target `bwrap_argv`: the invariants live in `fuzz/checks/bwrap_argv.rs`, shared with the
//! corpus replay test.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::bwrap_argv::run(data));
