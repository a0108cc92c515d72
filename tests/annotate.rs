//! `palisade annotate` against the real built-in fs-server, started in its real sandbox: the
//! draft names each tool's path argument with the right roles, loads back into the policy
//! engine, and an existing (possibly reviewed) file is never overwritten silently.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::process::Command;

use palisade::policy::{Policy, PolicyOptions, PolicyPaths};

fn annotate(dir: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let cfg = dir.join("cfg.json");
    let cfg_text = serde_json::json!({
        "mcpServers": {"fs": {"command": env!("CARGO_BIN_EXE_palisade"), "args": ["fs-server"]}},
        "palisade": {"sandboxDir": dir.join("sandbox"), "sandboxPolicy": "warn"}
    });
    std::fs::write(&cfg, cfg_text.to_string()).unwrap();
    Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["--log-level", "warn", "annotate", "--config"])
        .arg(&cfg)
        .arg("--output")
        .arg(dir.join("ann.json"))
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn drafts_annotations_that_the_engine_loads() {
    let dir = tempfile::tempdir().unwrap();
    let out = annotate(dir.path(), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("ann.json")).unwrap()).unwrap();
    let tools = doc["servers"]["fs"]["tools"].as_array().unwrap();
    let tool = |n: &str| tools.iter().find(|t| t["toolName"] == n).unwrap().clone();
    assert_eq!(
        tool("read")["args"]["path"],
        serde_json::json!(["read-path"])
    );
    let write_roles = tool("write")["args"]["path"].clone();
    assert!(
        write_roles
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("write-path")),
        "{write_roles}"
    );
    assert!(tool("read")["comment"].as_str().unwrap().contains("DRAFT"));
    Policy::load(
        &PolicyPaths {
            policy: None,
            annotations: Some(dir.path().join("ann.json")),
            lists: None,
        },
        PolicyOptions::default(),
    )
    .expect("the draft loads as tool-annotations.json");

    // A second run must not replace a file someone may have reviewed.
    let again = annotate(dir.path(), &[]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert!(annotate(dir.path(), &["--force"]).status.success());
}

// A server with a network allowlist (README's `fetch` entry has one) failed with "no egress
// proxy was started for this server": annotate starts none. Its tools are listed with no
// network at all, under enforce.
#[test]
fn a_server_with_an_allowlist_is_listed_without_network() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("cfg.json");
    let cfg_text = serde_json::json!({
        "mcpServers": {"fs": {"command": env!("CARGO_BIN_EXE_palisade"), "args": ["fs-server"],
                              "sandbox": {"network": {"allowedDomains": ["example.com"]}}}},
        "palisade": {"sandboxDir": dir.path().join("sandbox"), "sandboxPolicy": "enforce"}
    });
    std::fs::write(&cfg, cfg_text.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["--log-level", "warn", "annotate", "--config"])
        .arg(&cfg)
        .arg("--output")
        .arg(dir.path().join("ann.json"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("ann.json")).unwrap()).unwrap();
    assert!(
        !doc["servers"]["fs"]["tools"].as_array().unwrap().is_empty(),
        "{doc}"
    );
}
