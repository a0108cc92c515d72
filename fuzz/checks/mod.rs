//! The fuzz checks: each module decodes one input and asserts the invariants of one piece of
//! Palisade, panicking on a violation. Shared, file for file, by the cargo-fuzz targets
//! (`fuzz/fuzz_targets/*.rs`), the corpus replay test (`tests/fuzz_corpus.rs`) and the
//! property tests (`tests/props.rs`), so that a crash input found by the fuzzer replays
//! through exactly the same assertions in a normal `cargo test`.

#![allow(dead_code)]

pub mod bwrap_argv;
pub mod connect_verdict;
pub mod domain_match;
pub mod file_uri;
pub mod jsonrpc_framing;
pub mod policy_load;
pub mod root_guard;
pub mod upstream_frame;

/// One target's check.
pub type Check = fn(&[u8]);

/// Every target, by name, for the replay test.
pub const TARGETS: &[(&str, Check)] = &[
    ("bwrap_argv", bwrap_argv::run),
    ("connect_verdict", connect_verdict::run),
    ("domain_match", domain_match::run),
    ("file_uri", file_uri::run),
    ("jsonrpc_framing", jsonrpc_framing::run),
    ("policy_load", policy_load::run),
    ("root_guard", root_guard::run),
    ("upstream_frame", upstream_frame::run),
];

/// A cursor over the fuzzer's bytes: each take consumes input, and an exhausted input reads
/// as zeros, so every byte string decodes to some value (libFuzzer mutates freely).
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    pub fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }

    /// One of `items`.
    pub fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }

    /// Up to `max` raw bytes, length-prefixed.
    pub fn bytes(&mut self, max: usize) -> &'a [u8] {
        let n = self.below(max + 1).min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }

    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// Where checks that need files create them: `$PALISADE_FUZZ_SCRATCH` (scripts/fuzz.sh
/// points it into target/ and removes it afterwards), else the system temp directory. Every
/// file lives in a `TempDir` removed when the check returns.
pub fn scratch() -> tempfile::TempDir {
    let base = std::env::var_os("PALISADE_FUZZ_SCRATCH")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let _ = std::fs::create_dir_all(&base);
    tempfile::Builder::new()
        .prefix("palisade-fuzz-")
        .tempdir_in(&base)
        .expect("scratch directory")
}
