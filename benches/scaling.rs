//! Scaling curves for `scripts/bench.sh`: cost of one policy evaluation against the number of
//! rules (10-10,000) and of one roots check against the number of roots (1-1,000).
//!
//!   cargo bench --bench scaling            # prints one JSON object on stdout
//!   cargo bench --bench scaling -- --quick # fewer batches
//!   (under `cargo test --all-targets`: a smoke run with tiny sizes)
//!
//! A plain program rather than criterion so the script reads one JSON object instead of
//! parsing criterion's text. Each point is the median (and minimum) over batches of the mean
//! per-operation time inside a batch. It measures; it asserts nothing about time.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use palisade::policy::{CallContext, Policy, PolicyOptions, PolicyPaths, Scope};
use palisade::roots::guard::{GuardOptions, Need, RootGuard};
use palisade::sandbox::Access;
use serde_json::{json, Value};

/// Median and minimum of `batches` batch means, in nanoseconds per operation.
fn measure(batches: usize, target: Duration, mut op: impl FnMut()) -> Value {
    // Calibrate the batch size so one batch takes about `target`.
    let mut per = 1u64;
    loop {
        let t = Instant::now();
        for _ in 0..per {
            op();
        }
        if t.elapsed() >= target / 4 || per >= 1 << 24 {
            break;
        }
        per *= 2;
    }
    let per = (per * 4).max(1);
    let mut xs: Vec<f64> = (0..batches)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..per {
                op();
            }
            t.elapsed().as_secs_f64() * 1e9 / per as f64
        })
        .collect();
    xs.sort_by(f64::total_cmp);
    let r = |x: f64| (x * 10.0).round() / 10.0;
    json!({"medianNs": r(xs[xs.len() / 2]), "minNs": r(xs[0]), "batches": batches, "perBatch": per})
}

/// The generator of benches/policy.rs: N path rules over 100 servers x 10 tools; the call
/// matches the last rule.
fn policy_point(n: usize, batches: usize, target: Duration) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let rules: Vec<_> = (0..n)
        .map(|i| {
            json!({"name": format!("r{i}"),
            "if": {"server": [format!("s{}", i % 100)], "tool": [format!("t{}", (i / 100) % 10)],
                   "paths": {"roles": ["read-path"], "within": format!("/data/{i}")}},
            "then": "allow", "reason": "gen"})
        })
        .collect();
    let tools: Vec<_> = (0..10)
        .map(|t| json!({"toolName": format!("t{t}"), "args": {"p": ["read-path"]}}))
        .collect();
    let servers: serde_json::Map<_, _> = (0..100)
        .map(|s| (format!("s{s}"), json!({"tools": tools})))
        .collect();
    std::fs::write(
        dir.path().join("p.json"),
        json!({"rules": rules}).to_string(),
    )
    .expect("write");
    std::fs::write(
        dir.path().join("a.json"),
        json!({"servers": servers}).to_string(),
    )
    .expect("write");
    let p = Policy::load(
        &PolicyPaths {
            policy: Some(dir.path().join("p.json")),
            annotations: Some(dir.path().join("a.json")),
            lists: None,
        },
        PolicyOptions::default(),
    )
    .expect("generated policy loads");
    let args = json!({"p": format!("/data/{}/x", n - 1)});
    let args = args.as_object().expect("object");
    let server = format!("s{}", (n - 1) % 100);
    let tool = format!("t{}", ((n - 1) / 100) % 10);
    let empty = Scope::default();
    let mut m = measure(batches, target, || {
        black_box(p.evaluate(&CallContext {
            server: &server,
            tool: &tool,
            arguments: args,
            cwd: None,
            home: None,
            scope: &empty,
            roots: &[],
        }));
    });
    m["rules"] = json!(n);
    m
}

/// RootGuard with N roots that do not exist (canonicalisation keeps them as written, so this
/// is the lookup, not realpath); the path is inside the last root.
fn roots_point(n: usize, batches: usize, target: Duration) -> Value {
    let roots: Vec<(PathBuf, Access)> = (0..n)
        .map(|i| {
            let dir = PathBuf::from(format!("/nonexistent-palisade-bench/project{i:04}/src"));
            (dir, if i % 2 == 0 { Access::Rw } else { Access::Ro })
        })
        .collect();
    let guard = RootGuard::new(roots, GuardOptions::default()).expect("guard");
    let inside = PathBuf::from(format!(
        "/nonexistent-palisade-bench/project{:04}/src/a/b/c/file.rs",
        n - 1
    ));
    let mut m = measure(batches, target, || {
        black_box(
            guard
                .check_canonical(black_box(inside.clone()), Need::Read)
                .is_ok(),
        );
    });
    m["roots"] = json!(n);
    m
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    // `cargo test --all-targets` runs bench targets without `--bench`: a smoke run.
    let smoke = !argv.iter().any(|a| a == "--bench");
    let quick = argv.iter().any(|a| a == "--quick");
    let (batches, target) = if smoke {
        (3, Duration::from_millis(1))
    } else if quick {
        (15, Duration::from_millis(10))
    } else {
        (41, Duration::from_millis(20))
    };
    let rule_counts: &[usize] = if smoke {
        &[10, 100]
    } else {
        &[10, 100, 1_000, 10_000]
    };
    let root_counts: &[usize] = if smoke {
        &[1, 10]
    } else {
        &[1, 10, 100, 1_000]
    };
    let policy: Vec<_> = rule_counts
        .iter()
        .map(|&n| policy_point(n, batches, target))
        .collect();
    let roots: Vec<_> = root_counts
        .iter()
        .map(|&n| roots_point(n, batches, target))
        .collect();
    println!("{}", json!({"policyRules": policy, "roots": roots}));
}
