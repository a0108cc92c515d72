//! `palisade trace-denials` (with strace): what a server without a profile was refused, and
//! a host file the sandbox hides.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::{node_server, palisade};
use crate::*;

/// Runs `palisade run ARGS -- CMD` with `stdin` written and closed; returns (status ok, stderr).
fn run_with_input(args: &[&str], stdin: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new(palisade())
        .arg("run")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn has_strace() -> bool {
    Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The learn aid names what an unknown server was refused: server-memory without its
/// profile tries to write its graph next to its code (read-only); with the profile, it
/// writes into its state dir and nothing is refused there.
#[test]
fn trace_denials_names_what_a_server_without_a_profile_was_refused() {
    if !bwrap_usable() || !has_strace() {
        support::skip("needs bubblewrap namespaces and strace");
        return;
    }
    let ws = Ws::new();
    let input = concat!(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_entities","arguments":{"entities":[{"name":"a","entityType":"t","observations":["x"]}]}}}"#,
        "\n"
    );
    let server = node_server("server-memory");
    let state = ws.p("state");
    let (_, without) = run_with_input(
        &[
            "--profile",
            "none",
            "--trace-denials",
            "--",
            "node",
            &server,
        ],
        input,
    );
    let dist = Path::new(&server).parent().unwrap().display().to_string();
    assert!(
        without
            .lines()
            .any(|l| l.contains("write") && l.contains(&dist) && l.contains("memory")),
        "no write denial under {dist} reported:\n{without}"
    );
    let (_, with) = run_with_input(
        &[
            "--state-dir",
            &state,
            "--trace-denials",
            "--",
            "node",
            &server,
        ],
        input,
    );
    assert!(with.contains("trace-denials:"), "{with}");
    assert!(
        !with
            .lines()
            .any(|l| l.contains("write") && l.contains("memory")),
        "the profile should have made the write succeed:\n{with}"
    );
    assert!(Path::new(&state)
        .join("server-memory/memory.jsonl")
        .exists());
}

/// Control and attack for the trace: the same read succeeds unsandboxed and is reported as
/// refused inside.
#[test]
fn trace_denials_reports_a_host_file_the_sandbox_hides() {
    if !bwrap_usable() || !has_strace() {
        support::skip("needs bubblewrap namespaces and strace");
        return;
    }
    let ws = Ws::new();
    let secret = ws.p("secret/secret.txt");
    let script = format!("open({secret:?}).read()");
    let control = Command::new("/usr/bin/python3")
        .args(["-c", &script])
        .status()
        .unwrap();
    assert!(control.success(), "control: unsandboxed read must work");
    let (ok, err) = run_with_input(
        &["--trace-denials", "--", "/usr/bin/python3", "-c", &script],
        "",
    );
    assert!(!ok, "the read must fail inside the sandbox");
    assert!(
        err.lines()
            .any(|l| l.contains("read") && l.contains(&secret) && l.contains("ENOENT")),
        "{err}"
    );
}
