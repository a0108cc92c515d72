//! `palisade serve` as a subprocess, driven by real MCP clients.

use serde_json::{json, Value};

use crate::support::*;

#[test]
fn aggregates_three_servers_under_namespaced_names() {
    let ws = Workspace::new();
    let cfg = ws.config(three_servers(&ws, None), json!({}));
    let r = drive(&ws, "aggregate", &strs(&serve_cmd(&cfg)), &[]);
    let tools = names(&r["tools"]);
    for expected in [
        "fs__read_text_file",
        "fs__write_file",
        "fs__list_allowed_directories",
        "everything__echo",
        "everything__trigger-long-running-operation",
        "probe__pid",
    ] {
        assert!(
            tools.contains(&expected.to_string()),
            "{expected} missing from {tools:?}"
        );
    }
    assert!(
        tools.iter().all(|t| t.contains("__")),
        "every tool is namespaced: {tools:?}"
    );
    assert_eq!(r["echo"]["text"], "Echo: hello through palisade");
    // server-filesystem works in the session sandbox dir (palisade's first root).
    let sandbox = std::fs::canonicalize(ws.path().join("sandbox")).unwrap();
    let dirs = r["dirs"]["text"].as_str().unwrap();
    assert!(dirs.contains(&sandbox.display().to_string()), "{dirs}");
    assert_eq!(r["unknown"]["ok"], false);
    assert!(r["unknown"]["text"]
        .as_str()
        .unwrap()
        .contains("unknown tool"));
    // prompts are namespaced too; resources keep their URIs and can be read through palisade
    let prompts = names(&r["prompts"]);
    assert!(
        prompts.contains(&"everything__simple-prompt".to_string()),
        "{prompts:?}"
    );
    assert_eq!(r["prompt_messages"], 1);
    assert!(!r["resources"].as_array().unwrap().is_empty());
    // completions route by the namespaced prompt name and come back from the real server
    assert_eq!(r["completion"], json!(["Sales"]));
    assert_eq!(r["read_first_resource"], 1);
}

// What a tool list keeps through the gateway (everything, byte for byte) is tests/fidelity/.

#[test]
fn progress_reaches_the_client_under_its_own_token() {
    let ws = Workspace::new();
    let cfg = ws.config(three_servers(&ws, None), json!({}));
    let r = drive(&ws, "progress", &strs(&serve_cmd(&cfg)), &[]);
    assert_eq!(r["result"]["ok"], true, "{r}");
    let progress: Vec<Value> = r["progress"].as_array().unwrap().clone();
    assert_eq!(
        progress,
        vec![
            json!([1.0, 4.0]),
            json!([2.0, 4.0]),
            json!([3.0, 4.0]),
            json!([4.0, 4.0])
        ]
    );
}

#[test]
fn cancellation_reaches_the_downstream_server() {
    let ws = Workspace::new();
    let cfg = ws.config(three_servers(&ws, None), json!({}));
    // Inside the session sandbox dir: the one place every server may write, sandboxed or not.
    let marker = ws.path().join("sandbox/cancelled-marker");
    let r = drive(
        &ws,
        "cancel",
        &strs(&serve_cmd(&cfg)),
        &[("DRIVE_MARKER", marker.to_str().unwrap())],
    );
    assert_eq!(
        r["marker_written"], true,
        "the probe saw the cancellation: {r}"
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "cancelled");
    assert_eq!(
        r["after"]["ok"], true,
        "the gateway still serves after a cancel: {r}"
    );
}

#[test]
fn a_server_killed_mid_call_fails_that_call_and_comes_back() {
    let ws = Workspace::new();
    let cfg = ws.config(three_servers(&ws, None), json!({}));
    let r = drive(&ws, "crash", &strs(&serve_cmd(&cfg)), &[]);
    let inflight = &r["inflight"];
    assert_eq!(
        inflight["ok"], false,
        "the in-flight call got an error: {r}"
    );
    assert!(
        inflight["text"]
            .as_str()
            .unwrap()
            .contains("server `probe` exited"),
        "{inflight}"
    );
    let after_crash = names(&r["tools_after_crash"]);
    assert!(
        !after_crash.iter().any(|t| t.starts_with("probe__")),
        "{after_crash:?}"
    );
    assert!(after_crash.iter().any(|t| t.starts_with("everything__")));
    let notes = names(&r["notifications"]);
    assert!(
        notes
            .iter()
            .filter(|m| *m == "notifications/tools/list_changed")
            .count()
            >= 2,
        "told once when it went, once when it came back: {notes:?}"
    );
    assert!(names(&r["tools_after_restart"]).contains(&"probe__pid".to_string()));
    assert_eq!(r["second"]["ok"], true, "{r}");
    assert_ne!(
        r["second"]["text"], r["first"]["text"],
        "a new server process: {r}"
    );
    assert_eq!(r["other_server_still_works"]["text"], "Echo: x");
}

#[test]
fn a_server_that_never_answers_its_first_request_times_out_alone() {
    let ws = Workspace::new();
    let servers = json!({
        "mute": {"command": python().display().to_string(), "args": ["-c", "import time; time.sleep(600)"]},
        "everything": {"command": "node", "args": [node_server("server-everything"), "stdio"]}
    });
    // Long enough for node to start inside the real sandbox on a loaded 2-core machine; the
    // mute server still never answers, so it must be the only one timed out.
    let cfg = ws.config(servers, json!({"startupTimeout": 8}));
    let r = drive(&ws, "hang", &strs(&serve_cmd(&cfg)), &[]);
    let tools = names(&r["tools"]);
    assert!(
        tools.iter().any(|t| t.starts_with("everything__")),
        "{tools:?}"
    );
    assert!(!tools.iter().any(|t| t.starts_with("mute__")));
    let msg = r["mute_call"]["text"].as_str().unwrap();
    assert_eq!(r["mute_call"]["ok"], false);
    assert!(msg.contains("server `mute` is not running"), "{msg}");
    // Its first request (`server/discover`, then `initialize`) is never answered.
    assert!(
        msg.contains("no answer to server/discover (its first request) within 8s"),
        "{msg}"
    );
    assert!(
        msg.contains("\"protocol\": \"2025-11-25\""),
        "the fix is named: {msg}"
    );
    assert_eq!(r["echo"]["text"], "Echo: still here");
}

#[test]
fn stdout_carries_only_json_rpc_and_stdin_eof_reaps_every_child() {
    let ws = Workspace::new();
    let cfg = ws.config(three_servers(&ws, None), json!({}));
    let r = drive(&ws, "stdout", &strs(&serve_cmd(&cfg)), &[]);
    assert_eq!(r["bad_lines"], json!([]), "non-JSON-RPC on stdout: {r}");
    assert!(r["lines"].as_u64().unwrap() >= 7, "{r}");
    assert_eq!(r["exit"], 0, "palisade exits on stdin EOF: {r}");
    assert!(
        r["children"].as_array().unwrap().len() >= 3,
        "saw the servers: {r}"
    );
    assert_eq!(
        r["children_alive"],
        json!([]),
        "every child process is gone: {r}"
    );
    // The servers did log on stderr meanwhile; it went to the log, not stdout.
    assert!(ws.stderr_text().contains("probe server starting"));
}

/// A write into a directory granted read-only (allowRead) never reaches the server: the
/// proxy's roots check (the same root set the sandbox mounts) refuses it first with FORBIDDEN
/// naming the read-only root, and audits it as denied; nothing is written. This used to be
/// the end-to-end `[SANDBOX BLOCKED]` test; since the roots check, a path argument into a
/// read-only root cannot reach the sandbox any more, so the marker is proven by the
/// classifier's unit tests (`gateway::call::blocked`) and by writes a server makes on its own.
/// Control: the same directory is writable by this process (the refusal is palisade's).
#[test]
fn writes_into_a_read_only_root_are_refused_by_the_proxy_before_the_sandbox() {
    let ws = Workspace::new();
    let target = ws.path().join("read-only-grant");
    std::fs::create_dir(&target).unwrap();
    let sandbox = json!({"filesystem": {"allowRead": [target.display().to_string()]}});
    let cfg = ws.config(three_servers(&ws, Some(sandbox)), json!({}));
    let r = drive(
        &ws,
        "blocked",
        &strs(&serve_cmd(&cfg)),
        &[("DRIVE_TARGET", target.to_str().unwrap())],
    );
    for t in [&r["raise"], &r["result"], &r["fs"]] {
        assert_eq!(t["is_error"], true, "{r}");
        let text = t["text"].as_str().unwrap();
        assert!(text.starts_with("FORBIDDEN:"), "{text}");
        assert!(text.contains("read-only root"), "{text}");
        assert!(text.contains(&target.display().to_string()), "{text}");
    }
    assert_eq!(r["files_present"], json!([]), "nothing was written: {r}");
    let records = audit_records(&ws);
    let denied = records
        .iter()
        .filter(|rec| rec["result"]["status"] == "denied")
        .count();
    assert!(
        denied >= 3,
        "each refusal is audited as denied: {records:?}"
    );
    std::fs::write(target.join("control.txt"), "x").unwrap();
}

#[test]
fn logging_is_relayed_from_a_downstream_server() {
    let ws = Workspace::new();
    let cfg = ws.config(three_servers(&ws, None), json!({}));
    let r = drive(&ws, "logging", &strs(&serve_cmd(&cfg)), &[]);
    assert_eq!(r["toggle"]["ok"], true, "{r}");
    let notes = names(&r["notifications"]);
    assert!(
        notes.contains(&"notifications/message".to_string()),
        "{notes:?}"
    );
}

/// A request the server never answers ends with an error at the call timeout instead of
/// hanging, and is cancelled downstream; an answer over the 16 MiB line limit (which rmcp
/// would drop silently) is a protocol fault of the server: the call fails at once naming the
/// limit, the server is restarted, and the gateway keeps serving.
#[test]
fn hung_and_oversize_answers_end_in_errors_not_hangs() {
    let ws = Workspace::new();
    let cfg = ws.config(three_servers(&ws, None), json!({"callTimeout": 3}));
    let marker = ws.path().join("sandbox/timeout-marker");
    let r = drive(
        &ws,
        "timeouts",
        &strs(&serve_cmd(&cfg)),
        &[("DRIVE_MARKER", marker.to_str().unwrap())],
    );
    assert_eq!(r["hung"]["ok"], false, "{r}");
    let text = r["hung"]["text"].as_str().unwrap();
    assert!(text.contains("did not answer within 3s"), "{text}");
    assert_eq!(r["huge"]["ok"], false, "{r}");
    let text = r["huge"]["text"].as_str().unwrap();
    assert!(
        text.contains("16777216-byte limit") && text.contains("protocol fault"),
        "{text}"
    );
    assert_eq!(r["hung_cancelled_downstream"], true, "{r}");
    assert_eq!(r["small_after"]["ok"], true, "{r}");
}

#[test]
fn sigterm_stops_the_gateway_and_reaps_every_child() {
    let ws = Workspace::new();
    let cfg = ws.config(three_servers(&ws, None), json!({}));
    let r = drive(&ws, "sigterm", &strs(&serve_cmd(&cfg)), &[]);
    assert_eq!(r["exit"], 0, "{r}");
    assert!(
        r["children"].as_array().unwrap().len() >= 3,
        "saw the servers: {r}"
    );
    assert_eq!(
        r["children_alive"],
        json!([]),
        "every child process is gone: {r}"
    );
}
