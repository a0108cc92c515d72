//! `palisade bench-client` drives a real server and reports well-formed figures (the values
//! themselves are for scripts/bench.sh; no timing is asserted here).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod support;

use std::process::Command;

use support::{palisade, run_ok};

#[test]
fn bench_client_measures_fs_server_calls() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    std::fs::write(dir.join("x"), "x").unwrap();
    let exe = palisade();
    let args = format!("{{\"path\":\"{}\"}}", dir.join("x").display());
    let out = run_ok(
        Command::new(exe)
            .args([
                "bench-client",
                "--calls",
                "40",
                "--concurrency",
                "4",
                "--warmup",
                "5",
            ])
            .args([
                "--tool",
                "stat",
                "--args",
                &args,
                "--",
                exe,
                "fs-server",
                "--root",
            ])
            .arg(&dir),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], 40);
    assert_eq!(v["errors"], 0);
    assert_eq!(v["toolErrors"], 0);
    assert_eq!(v["concurrency"], 4);
    let lat = &v["latencyUs"];
    for k in ["min", "median", "p90", "p99", "max", "mean"] {
        assert!(lat[k].as_f64().unwrap() > 0.0, "{k}");
    }
    assert!(lat["median"].as_f64() <= lat["p99"].as_f64());

    // A call that the server refuses is counted as a tool error, not as a success.
    let outside = r#"{"path":"/etc/hostname"}"#;
    let out = Command::new(exe)
        .args(["bench-client", "--calls", "5", "--warmup", "0"])
        .args([
            "--tool",
            "stat",
            "--args",
            outside,
            "--",
            exe,
            "fs-server",
            "--root",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], 0);
    assert_eq!(v["toolErrors"], 5);
}
