//! cargo-fuzz target `jsonrpc_framing`: the invariants live in `fuzz/checks/jsonrpc_framing.rs`, shared with the
//! corpus replay test.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::jsonrpc_framing::run(data));
