//! Replays every fuzz corpus and regression input (fuzz/corpus/<target>/*,
//! fuzz/regressions/<target>/*) through the same checks the cargo-fuzz targets run
//! (fuzz/checks/), on the stable toolchain, so an input that once crashed stays fixed and
//! the invariants are exercised even where cargo-fuzz cannot build.

#[path = "../fuzz/checks/mod.rs"]
mod checks;

use std::path::Path;

fn replay(kind: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind);
    let mut count = 0;
    for (target, check) in checks::TARGETS {
        let dir = root.join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<_> = entries.map(|e| e.expect("corpus entry").path()).collect();
        files.sort();
        for f in files {
            let data = std::fs::read(&f).expect("corpus file");
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(outcome.is_ok(), "{target}: {} fails its check", f.display());
            count += 1;
        }
    }
    count
}

#[test]
fn corpora_pass_their_checks() {
    let n = replay("corpus");
    // The corpora are committed: an empty replay would prove nothing.
    assert!(n >= 6, "only {n} corpus inputs found");
}

#[test]
fn past_crashes_stay_fixed() {
    replay("regressions");
}
