//! `palisade policy explain` and `palisade policy test` on a corpus policy.

use serde_json::{json, Value};

use crate::*;

fn palisade(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn cli_explain_and_test() {
    let c = |f: &str| cfg("generated").join(f).display().to_string();
    let (ok, out) = palisade(&[
        "policy",
        "explain",
        "--policy",
        &c("compiled-policy.json"),
        "--annotations",
        &c("tool-annotations.json"),
        "--home",
        HOME,
        "--sandbox-dir",
        SANDBOX,
        "--server",
        "filesystem",
        "--tool",
        "move_file",
        "--args",
        r#"{"source":"/home/provos/Documents/a","destination":"/home/provos/Downloads/a"}"#,
    ]);
    assert!(ok, "{out}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    // read (Documents) allowed, write (Downloads) allowed, delete outside Downloads escalated.
    assert_eq!(v["decision"], "escalate");
    assert_eq!(v["rule"], "escalate-move-with-delete-outside-permitted");
    assert_eq!(v["roles"], json!(["delete-path"]));

    let (ok, out) = palisade(&[
        "policy",
        "test",
        "--policy",
        &c("compiled-policy.json"),
        "--annotations",
        &c("tool-annotations.json"),
        "--lists",
        &c("dynamic-lists.json"),
        "--home",
        HOME,
        "--sandbox-dir",
        SANDBOX,
        "--protected",
        "/home/provos/.ironcurtain",
        "--scenarios",
        &c("test-scenarios.json"),
    ]);
    // The corpus labels are imperfect, so the run fails; every scenario is still reported.
    assert!(!ok);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 322);
    assert_eq!(lines[0]["index"], 0);
    assert!(lines[0].get("expected").is_some() && lines[0].get("rule").is_some());
    assert_eq!(lines[321]["summary"]["total"], 321);
    assert_eq!(lines[321]["summary"]["passed"], 160);
}

/// `explain` on a tool no annotations file covers denied it as unknown, while `serve`
/// (which guesses its roles from the live definition) escalated the same call: the answer
/// now says why the two differ and how to explain it as serve would; with the file, no note.
#[test]
fn explain_says_why_an_unannotated_tool_differs_from_serve() {
    let c = |f: &str| cfg("generated").join(f).display().to_string();
    let explain = |annotations: Option<&str>| -> Value {
        let policy = c("compiled-policy.json");
        let mut args = vec!["policy", "explain", "--policy", &policy];
        let annotations = annotations.map(&c);
        if let Some(a) = &annotations {
            args.extend(["--annotations", a.as_str()]);
        }
        args.extend([
            "--home",
            HOME,
            "--sandbox-dir",
            SANDBOX,
            "--server",
            "fs",
            "--tool",
            "write_file",
            "--args",
            r#"{"path":"/tmp/x"}"#,
        ]);
        let (ok, out) = palisade(&args);
        assert!(ok, "{out}");
        serde_json::from_str(out.trim()).unwrap()
    };
    let v = explain(None);
    assert_eq!(v["rule"], "structural-unknown-tool", "{v}");
    let note = v["note"].as_str().unwrap_or_default();
    assert!(note.contains("--annotations"), "{v}");
    let v = explain(Some("tool-annotations.json"));
    assert!(v.get("note").is_none(), "{v}");
}
