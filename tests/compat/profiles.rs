//! What a profile yields: the profile commands, a profile from a directory that relaxes the
//! PID namespace (and an unknown name refused), and `palisade run` delivering its grants as
//! the profile's roots say.

use std::process::Command;

use serde_json::{json, Value};

use crate::support::{node_server, palisade, run_ok};
use crate::*;

/// `palisade profiles list|show` and `palisade check --config` report the profiles.
#[test]
fn profiles_commands_show_what_a_profile_yields() {
    let out = Command::new(palisade())
        .args(["profiles", "list"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for name in [
        "server-filesystem",
        "server-everything",
        "server-memory",
        "mcp-server-git",
        "mcp-server-fetch",
        "mcp-server-time",
        "palisade-fs-server",
        "server-sequential-thinking",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }

    let ws = Ws::new();
    let out = Command::new(palisade())
        .args([
            "profiles",
            "show",
            "server-memory",
            "--json",
            "--state-dir-root-unused",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success(), "unknown flags are refused");
    let cfg = ws.config(
        "memory",
        json!({"command": "node", "args": [node_server("server-memory")]}),
    );
    let out = Command::new(palisade())
        .args([
            "profiles",
            "show",
            "server-memory",
            "--server",
            "memory",
            "--json",
            "--config",
            &cfg,
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).expect("profiles show --json");
    let state = ws.p("state/memory");
    assert_eq!(
        v["env"]["MEMORY_FILE_PATH"],
        json!(format!("{state}/memory.jsonl"))
    );
    assert_eq!(v["mounts"][0]["path"], json!(state));
    assert_eq!(v["mounts"][0]["access"], json!("rw"));

    // How roots reach a server is shown, the session-dir rule included.
    for (name, words) in [
        ("server-filesystem", "each root appended as an argument"),
        ("mcp-server-git", "never the session sandbox dir"),
        ("mcp-server-time", "MCP roots and bind mounts only"),
    ] {
        let out = Command::new(palisade())
            .args(["profiles", "show", name, "--json"])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).expect("profiles show --json");
        let roots = v["roots"].as_str().unwrap_or_default();
        assert!(roots.contains(words), "{name}: {roots}");
    }

    let out = Command::new(palisade())
        .args(["check", "--config", &cfg])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("profile: server-memory (package @modelcontextprotocol/server-memory)"),
        "{text}"
    );

    // A broken override is reported with file and field.
    let dir = ws.dir.path().join("profiles");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("mine.json"),
        r#"{"description": "x", "reads": []}"#,
    )
    .unwrap();
    let out = Command::new(palisade())
        .args(["profiles", "list", "--profiles-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("mine.json") && err.contains("reads"), "{err}");
}

/// A profile's relaxation reaches the sandbox: with `relax.sharePid` the command sees the
/// host's processes, without it only its own (the control).
#[test]
fn a_profile_from_a_directory_relaxes_the_pid_namespace_and_unknown_names_are_refused() {
    if skipped_without_bwrap() {
        return;
    }
    let ws = Ws::new();
    let dir = ws.profiles(&[(
        "shared-pids",
        r#"{"description": "test", "relax": {"sharePid": "test of the relaxation"}}"#,
    )]);
    let count = |extra: &[&str]| -> usize {
        let out = run_ok(Command::new(palisade()).arg("run").args(extra).args([
            "--",
            "/bin/sh",
            "-c",
            "ls /proc | grep -c '^[0-9]'",
        ]));
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let dir_s = dir.display().to_string();
    // bwrap's init, sh, ls, grep.
    let own = count(&[]);
    let shared = count(&["--profiles-dir", &dir_s, "--profile", "shared-pids"]);
    assert!(
        own <= 5,
        "a private PID namespace shows only the sandbox's processes: {own}"
    );
    assert!(
        shared > own,
        "sharePid should show the host's processes: {shared} vs {own}"
    );

    let out = Command::new(palisade())
        .args(["run", "--profile", "no-such-profile", "--", "/bin/true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no-such-profile") && err.contains("server-memory"),
        "{err}"
    );
}

/// `palisade run` delivers its grants per the profile's `rootsAs` too: as arguments and as a
/// joined variable (a profile from a directory), and not at all without the profile (the
/// control: the command itself adds nothing).
#[test]
fn run_delivers_its_grants_per_the_profiles_roots_as() {
    if skipped_without_bwrap() {
        return;
    }
    let ws = Ws::new();
    let dir = ws.profiles(&[
        (
            "dirs-as-args",
            r#"{"description": "test", "rootsAs": {"flag": "--dir"}}"#,
        ),
        (
            "dirs-in-env",
            r#"{"description": "test", "rootsAs": {"env": "DIRS", "separator": ","}}"#,
        ),
    ]);
    let (granted, other) = (ws.p("granted"), ws.p("secret"));
    let run = |profile: &str| -> String {
        let out = run_ok(
            Command::new(palisade())
                .args(["run", "--profiles-dir"])
                .arg(&dir)
                .args(["--profile", profile, "--rw", &granted, "--ro", &other])
                .args([
                    "--",
                    "/bin/sh",
                    "-c",
                    r#"echo "args:$*"; echo "env:${DIRS:-unset}""#,
                    "sh",
                ]),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // `run` grants in its own order: the --ro directories, then the --rw ones.
    assert_eq!(
        run("dirs-as-args"),
        format!("args:--dir {other} --dir {granted}\nenv:unset\n")
    );
    assert_eq!(
        run("dirs-in-env"),
        format!("args:\nenv:{other},{granted}\n")
    );
    assert_eq!(run("none"), "args:\nenv:unset\n");
}
