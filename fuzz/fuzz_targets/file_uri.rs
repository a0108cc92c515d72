//! cargo-fuzz target `file_uri`: the invariants live in `fuzz/checks/file_uri.rs`, shared with the
//! corpus replay test.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::file_uri::run(data));
