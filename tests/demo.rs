//! `palisade demo` end to end: the real gateway, the real fs-server, the real sandbox when
//! bubblewrap works here. Proves the transcript's claims against the facts it reports.

use std::process::Command;

#[test]
fn demo_runs_end_to_end_and_cleans_up() {
    let before = demo_dirs();
    let out = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .arg("demo")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "tools listed through the gateway",
        "allowed read inside the workspace",
        "denied read outside the workspace",
        "write to the read-only part of the workspace",
        "audit records written",
        "Result: ",
    ] {
        assert!(
            stdout.contains(needle),
            "transcript lacks {needle:?}:\n{stdout}"
        );
    }
    assert!(
        !stdout.contains("demo-secret-7f3a"),
        "the secret leaked:\n{stdout}"
    );
    // Whatever the outcome, the workspace is gone.
    assert_eq!(
        demo_dirs(),
        before,
        "a palisade-demo-* directory was left behind"
    );
}

fn demo_dirs() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("palisade-demo-"))
        .collect();
    v.sort();
    v
}
