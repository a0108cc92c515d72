//! cargo-fuzz target `upstream_frame`: the invariants live in `fuzz/checks/upstream_frame.rs`, shared with the
//! corpus replay test.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::upstream_frame::run(data));
