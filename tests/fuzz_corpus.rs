//! Replays every fuzz corpus and regression input (fuzz/corpus/<target>/*,
//! fuzz/regressions/<target>/*) through the same checks the cargo-fuzz targets run
//! (fuzz/checks/), on the stable toolchain, so an input that once crashed stays fixed and
//! the invariants are exercised even where cargo-fuzz cannot build.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

#[path = "../fuzz/checks/mod.rs"]
mod checks;

use std::path::{Path, PathBuf};

/// The fewest committed corpus inputs a target may have: a target whose corpus directory is
/// missing, renamed or nearly empty would otherwise be exercised by nothing here.
const MIN_CORPUS: usize = 5;

/// The regression inputs committed under fuzz/regressions/ (every crash the fuzzers found,
/// see docs/security.md): raise it with each one added, so that the replay cannot pass with
/// nothing to replay if the directory moves.
const REGRESSIONS: usize = 15;

fn root(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind)
}

/// Runs every input in `fuzz/<kind>/<target>/` through its target's check; the count per
/// target, 0 for a target without a directory.
fn replay(kind: &str) -> Vec<(&'static str, usize)> {
    let root = root(kind);
    let mut counts = Vec::new();
    for (target, check) in checks::TARGETS {
        let mut count = 0;
        if let Ok(entries) = std::fs::read_dir(root.join(target)) {
            let mut files: Vec<_> = entries.map(|e| e.expect("corpus entry").path()).collect();
            files.sort();
            for f in files {
                let data = std::fs::read(&f).expect("corpus file");
                let outcome = std::panic::catch_unwind(|| check(&data));
                assert!(outcome.is_ok(), "{target}: {} fails its check", f.display());
                count += 1;
            }
        }
        counts.push((*target, count));
    }
    counts
}

/// Every directory under `fuzz/<kind>/` names a target (else its inputs are never replayed).
fn assert_dirs_name_targets(kind: &str) {
    for e in std::fs::read_dir(root(kind)).expect("fuzz directory") {
        let name = e.expect("fuzz entry").file_name();
        let name = name.to_string_lossy();
        assert!(
            checks::TARGETS.iter().any(|(t, _)| *t == name),
            "fuzz/{kind}/{name} is no target of fuzz/checks/mod.rs: its inputs are never replayed"
        );
    }
}

#[test]
fn corpora_pass_their_checks() {
    assert_dirs_name_targets("corpus");
    let counts = replay("corpus");
    // The corpora are committed: a target replaying (almost) nothing would prove nothing.
    let thin: Vec<_> = counts.iter().filter(|(_, n)| *n < MIN_CORPUS).collect();
    assert!(
        thin.is_empty(),
        "targets with fewer than {MIN_CORPUS} corpus inputs in fuzz/corpus/<target>/: {thin:?}"
    );
}

#[test]
fn past_crashes_stay_fixed() {
    assert_dirs_name_targets("regressions");
    let n: usize = replay("regressions").iter().map(|(_, n)| n).sum();
    assert!(
        n >= REGRESSIONS,
        "only {n} regression inputs replayed, {REGRESSIONS} are committed in fuzz/regressions/"
    );
}
