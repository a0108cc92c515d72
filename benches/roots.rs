//! RootGuard lookup cost with 100 roots (target: under 2 µs per check, syscalls excluded).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion};
use palisade::roots::guard::{GuardOptions, Need, RootGuard};
use palisade::sandbox::Access;

fn bench_guard(c: &mut Criterion) {
    // Roots that do not exist: canonicalisation keeps them as written, so the bench measures
    // the lookup itself, not realpath.
    let roots: Vec<(PathBuf, Access)> = (0..100)
        .map(|i| {
            (
                PathBuf::from(format!("/nonexistent-palisade-bench/project{i:03}/src")),
                if i % 2 == 0 { Access::Rw } else { Access::Ro },
            )
        })
        .collect();
    let guard = match RootGuard::new(roots, GuardOptions::default()) {
        Ok(g) => g,
        Err(e) => panic!("cannot build guard: {e}"),
    };
    let inside = PathBuf::from("/nonexistent-palisade-bench/project057/src/a/b/c/d/file.rs");
    let outside = PathBuf::from("/nonexistent-palisade-bench/project0570/src/a/b/c/d/file.rs");
    c.bench_function("guard_inside_100_roots", |b| {
        b.iter(|| {
            guard
                .check_canonical(black_box(inside.clone()), Need::Write)
                .is_ok()
        })
    });
    c.bench_function("guard_outside_100_roots", |b| {
        b.iter(|| {
            guard
                .check_canonical(black_box(outside.clone()), Need::Read)
                .is_err()
        })
    });
}

criterion_group!(benches, bench_guard);
criterion_main!(benches);
