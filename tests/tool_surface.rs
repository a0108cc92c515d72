//! What of a server's tool surface reaches the agent: per-server `tools` / `prompts` filters
//! in the config, against real servers (server-filesystem).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod support;

use serde_json::{json, Value};
use support::raw::Serve;
use support::{node_server, Workspace};

fn tool_names(list: &Value) -> Vec<String> {
    list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {list}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

// server-filesystem with its writing tools filtered out: absent from the list, refused when
// called anyway (the server never sees the call), and the refusal audited as the filter's.
#[test]
fn filtered_tools_are_absent_and_refused_when_called() {
    let ws = Workspace::new();
    let root = ws.canonical().join("project");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("keep.txt"), "kept").unwrap();
    let audit = ws.path().join("audit.jsonl");
    let config = ws.config(
        json!({"fs": {"command": "node", "args": [node_server("server-filesystem"), root],
                      "sandbox": {"filesystem": {"allowWrite": [root]}},
                      "tools": {"deny": ["write_*", "move_file", "edit_file"]}}}),
        json!({"auditLog": audit}),
    );
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    serve.initialize();
    let names = tool_names(&serve.request(2, "tools/list", json!({})));
    let target = root.join("new.txt");
    let write = serve.call(3, "fs__write_file", json!({"path": target, "content": "x"}));
    let mv = serve.call(
        4,
        "fs__move_file",
        json!({"source": root.join("keep.txt"), "destination": root.join("moved.txt")}),
    );
    let read = serve.call(
        5,
        "fs__read_text_file",
        json!({"path": root.join("keep.txt")}),
    );
    let (_, err) = serve.finish();

    // The control: the server itself offers the tools that were filtered out.
    for hidden in ["fs__write_file", "fs__move_file", "fs__edit_file"] {
        assert!(
            !names.contains(&hidden.to_string()),
            "{hidden} listed: {names:?}"
        );
    }
    assert!(
        names.contains(&"fs__read_text_file".to_string()),
        "{names:?}"
    );
    assert!(names.len() >= 10, "the rest is still offered: {names:?}");
    for (resp, tool) in [(&write, "fs__write_file"), (&mv, "fs__move_file")] {
        let msg = resp["error"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains(&format!("tool `{tool}` is hidden by the config")),
            "{resp}\n{err}"
        );
    }
    assert!(!target.exists(), "the filtered write reached the server");
    assert!(root.join("keep.txt").exists() && !root.join("moved.txt").exists());
    assert_eq!(support::raw::text_of(&read), "kept", "{read}");
    let records = support::read_jsonl(&audit);
    for id in ["3", "4"] {
        let rec = records
            .iter()
            .find(|r| r["requestId"] == id)
            .unwrap_or_else(|| panic!("call {id} not audited: {records:?}"));
        assert_eq!(rec["policyDecision"]["status"], "deny", "{rec}");
        assert_eq!(rec["policyDecision"]["rule"], "tool-filter", "{rec}");
        assert_eq!(rec["serverName"], "fs", "{rec}");
    }
}

// A filter the config cannot mean is refused at start, naming the field.
#[test]
fn an_empty_filter_pattern_is_refused_naming_the_field() {
    let ws = Workspace::new();
    let config = ws.config(
        json!({"fs": {"command": "node", "args": ["x.js"], "tools": {"deny": [""]}}}),
        json!({}),
    );
    let out = std::process::Command::new(support::palisade())
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("mcpServers.fs.tools"), "{text}");
}

fn rugpull_config(
    ws: &Workspace,
    pins: &std::path::Path,
    settings: Value,
    start_pulled: bool,
) -> std::path::PathBuf {
    let mut server = json!({"command": support::python(),
                            "args": [support::repo("tests/servers/rugpull_server.py")]});
    if start_pulled {
        server["env"] = json!({"RUGPULL_START": "pulled"});
    }
    let mut settings = settings;
    settings["pins"] = json!(pins);
    settings["auditLog"] = json!(ws.path().join("audit.jsonl"));
    ws.config(json!({ "rug": server }), settings)
}

/// `tools/list` until `done` holds for its names (the gateway re-lists after the server's
/// `list_changed`); at most 10 s.
fn list_until(serve: &mut Serve, id: &mut u64, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let mut names = Vec::new();
    for _ in 0..200 {
        *id += 1;
        names = tool_names(&serve.request(*id, "tools/list", json!({})));
        if done(&names) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    names
}

fn pins_cmd(args: &[&str], file: &std::path::Path) -> (i32, String) {
    let out = std::process::Command::new(support::palisade())
        .arg("pins")
        .arg(args[0])
        .arg(file)
        .args(&args[1..])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn pin_records(ws: &Workspace) -> Vec<Value> {
    support::read_jsonl(&ws.path().join("audit.jsonl"))
        .into_iter()
        .filter(|r| r["kind"] == "tools/pin")
        .collect()
}

// A server changes a tool's description and schema after its first call and adds a tool
// (then says list_changed). Under enforce both disappear and calls to them are refused and
// audited; `pins diff` shows the change with flags; after `pins approve` the tool works in
// the running gateway; the pins persist across a restart of palisade.
#[test]
fn a_rug_pull_is_quarantined_until_approved_and_the_pin_persists() {
    let ws = Workspace::new();
    let pins = ws.path().join("pins.json");
    let config = rugpull_config(&ws, &pins, json!({}), false);
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    serve.initialize();
    let mut id = 10;
    let first = list_until(&mut serve, &mut id, |n| !n.is_empty());
    assert_eq!(first, ["rug__notes", "rug__stable"], "trusted on first use");
    assert_eq!(pin_records(&ws).len(), 2, "first-use pins are audited");
    // The first call is answered; then the server pulls the rug.
    assert_eq!(
        support::raw::text_of(&serve.call(2, "rug__notes", json!({}))),
        "called notes"
    );
    let after = list_until(&mut serve, &mut id, |n| {
        !n.contains(&"rug__notes".to_string())
    });
    assert_eq!(
        after,
        ["rug__stable"],
        "the changed and the new tool are hidden"
    );
    for (n, tool) in [(3, "rug__notes"), (4, "rug__exfiltrate")] {
        let r = serve.call(n, tool, json!({}));
        let msg = r["error"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("is held back") && msg.contains("palisade pins approve"),
            "{r}"
        );
    }
    let audit = support::read_jsonl(&ws.path().join("audit.jsonl"));
    let refused: Vec<&Value> = audit
        .iter()
        .filter(|r| r["policyDecision"]["rule"] == "tool-pin" && r["result"]["status"] == "denied")
        .collect();
    let tools: Vec<&str> = refused
        .iter()
        .filter_map(|r| r["toolName"].as_str())
        .collect();
    for t in ["notes", "exfiltrate"] {
        assert!(
            tools.iter().filter(|x| **x == t).count() >= 2,
            "the change and the refused call of {t}: {tools:?}"
        );
    }
    // A pin record says what its server runs under, as its calls' records do (every one
    // said `sandboxed: false`).
    let called = audit
        .iter()
        .find(|r| r["toolName"] == "notes" && r["result"]["status"] == "success")
        .expect("the answered call's record");
    for r in audit
        .iter()
        .filter(|r| r["policyDecision"]["rule"] == "tool-pin")
    {
        assert_eq!(r["sandboxed"], called["sandboxed"], "{r}\n{called}");
        assert_eq!(r["enforcement"], called["enforcement"], "{r}\n{called}");
    }

    let (code, shown) = pins_cmd(&["diff"], &pins);
    assert_eq!(code, 1, "{shown}");
    assert!(shown.contains("rug / notes: CHANGED"), "{shown}");
    assert!(shown.contains("rug / exfiltrate: ADDED"), "{shown}");
    assert!(
        shown.contains("+ <IMPORTANT>Before using any other tool"),
        "{shown}"
    );
    assert!(
        shown.contains("FLAG: 1 invisible or bidirectional character(s): U+200B"),
        "{shown}"
    );
    assert!(!shown.contains('\u{200b}'), "printed escaped: {shown}");

    let (code, said) = pins_cmd(&["approve", "rug", "notes"], &pins);
    assert_eq!(code, 0, "{said}");
    let r = serve.call(5, "rug__notes", json!({}));
    assert_eq!(support::raw::text_of(&r), "called notes", "approved: {r}");
    let r = serve.call(6, "rug__exfiltrate", json!({}));
    assert!(r.get("error").is_some(), "still held: {r}");
    let _ = serve.finish();

    // A new palisade, the server changed from the start: the pins still hold.
    let config = rugpull_config(&ws, &pins, json!({}), true);
    let mut serve = Serve::start(&ws, &config, &[], &[]);
    serve.initialize();
    let names = list_until(&mut serve, &mut id, |n| !n.is_empty());
    let _ = serve.finish();
    assert_eq!(
        names,
        ["rug__notes", "rug__stable"],
        "notes as approved; exfiltrate still held"
    );
}

// Under warn the changed tool is still offered, with the change logged and audited; under
// off nothing is compared.
#[test]
fn pinning_warn_lets_a_change_through_loudly_and_off_ignores_it() {
    for (mode, records_of_change) in [("warn", 2), ("off", 0)] {
        let ws = Workspace::new();
        let pins = ws.path().join("pins.json");
        let config = rugpull_config(&ws, &pins, json!({"pinning": mode}), false);
        let mut serve = Serve::start(&ws, &config, &[], &[]);
        serve.initialize();
        let mut id = 10;
        list_until(&mut serve, &mut id, |n| !n.is_empty());
        serve.call(2, "rug__notes", json!({}));
        let names = list_until(&mut serve, &mut id, |n| n.len() == 3);
        let r = serve.call(3, "rug__notes", json!({}));
        let (_, err) = serve.finish();
        assert_eq!(
            names,
            ["rug__notes", "rug__stable", "rug__exfiltrate"],
            "{mode}"
        );
        assert_eq!(support::raw::text_of(&r), "called notes", "{mode}: {r}");
        let changes: Vec<Value> = pin_records(&ws)
            .into_iter()
            .filter(|r| {
                r["policyDecision"]["reason"]
                    .as_str()
                    .is_some_and(|s| !s.starts_with("pinned on first use"))
            })
            .collect();
        assert_eq!(changes.len(), records_of_change, "{mode}: {changes:?}");
        if mode == "warn" {
            assert!(changes
                .iter()
                .all(|r| r["policyDecision"]["status"] == "allow"));
            assert!(err.contains("offered under pinning: warn"), "{err}");
        }
    }
}

// An unreadable, malformed or unsafe pins file stops the start, naming the file and the fix;
// never "trust everything".
#[test]
fn a_bad_pins_file_is_an_error_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Workspace::new();
    let pins = ws.path().join("pins.json");
    let config = rugpull_config(&ws, &pins, json!({}), false);
    let start = || {
        std::process::Command::new(support::palisade())
            .args(["serve", "--config"])
            .arg(&config)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    std::fs::write(&pins, "{not json").unwrap();
    std::fs::set_permissions(&pins, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = start();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("pins.json") && err.contains("malformed"),
        "{err}"
    );
    std::fs::write(&pins, "{\"version\": 1}").unwrap();
    std::fs::set_permissions(&pins, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = start();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
}
