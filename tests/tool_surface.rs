//! What of a server's tool surface reaches the agent: per-server `tools` / `prompts` filters
//! in the config, against real servers (server-filesystem).

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
