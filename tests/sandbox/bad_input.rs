//! Bad input to `palisade run` is one line naming the fix, and nothing starts.

use std::process::Output;

use crate::common::{marker_path, palisade, text};

#[test]
fn bad_input_is_one_line_naming_the_fix_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let home = d.join("home");
    std::fs::create_dir(&home).unwrap();
    let touch = |extra: &[&str]| -> Output {
        let mut c = palisade();
        c.arg("run").args(extra).arg("--rw").arg(d).arg("--");
        c.arg("/usr/bin/touch").arg(marker_path(d));
        c.env("HOME", &home).output().unwrap()
    };
    let ro_and_rw = d.display().to_string();
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["--ro", "/nonexistent/dir"], 2, "does not exist"),
        (vec!["--rw", "/"], 2, "--allow-broad"),
        (vec!["--rw", home.to_str().unwrap()], 2, "home directory"),
        (vec!["--ro", &ro_and_rw], 2, "both read-only and read-write"),
        (
            vec!["--allow-domain", "https://example.com/x"],
            2,
            "sandbox.network",
        ),
        (
            vec!["--deny-domain", "example.com"],
            2,
            "no network to restrict",
        ),
        (vec!["--cwd", "/etc"], 2, "not inside any grant"),
        (vec!["--env", "PALISADE_SURELY_UNSET_VAR"], 2, "not set"),
    ];
    for (flags, code, needle) in cases {
        let out = touch(&flags);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{flags:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{flags:?}: {err}");
        assert!(err.contains(needle), "{flags:?}: {err}");
        assert!(!marker_path(d).exists(), "{flags:?} started the command");
    }
    let out = palisade()
        .args(["run", "--", "surely-not-a-command-xyz"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(text(&out.stderr).contains("not found in PATH"));
    // A command given as a path that is not there: not a PATH problem.
    let out = palisade()
        .args(["run", "--", "/surely/not/here/server"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(
        text(&out.stderr).contains("`/surely/not/here/server` does not exist"),
        "{}",
        text(&out.stderr)
    );
    let out = palisade().args(["run"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "missing command");
    // --allow-broad lifts the home refusal.
    let out = palisade()
        .args(["run", "--allow-broad", "--rw"])
        .arg(&home)
        .args(["--", "/usr/bin/touch"])
        .arg(home.join("ok"))
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(home.join("ok").exists());
}
