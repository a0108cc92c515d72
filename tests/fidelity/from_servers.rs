//! What real servers send reaches the agent as they wrote it: every list, result, read,
//! prompt and completion of server-everything and server-filesystem, one-server mode, and
//! their notifications.

use super::*;

#[test]
fn server_everything_through_palisade_is_its_own_json() {
    let ws = Workspace::new();
    let mut direct = Lines::spawn(&mut everything_cmd());
    let mut through = serve(&ws, support::everything_servers());

    // Lists: every entry as the server wrote it, names rewritten.
    let tools = direct.request("tools/list", json!({}));
    let got = through.request("tools/list", json!({}));
    assert_eq!(got, renamed(&tools, "tools", "everything"), "tools/list");
    let listed: Value = serde_json::from_str(&got).expect("JSON");
    assert!(
        listed["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .any(|t| t["execution"]["taskSupport"].is_string()),
        "no tool kept its `execution` field: {got}"
    );
    let prompts = direct.request("prompts/list", json!({}));
    assert_eq!(
        through.request("prompts/list", json!({})),
        renamed(&prompts, "prompts", "everything"),
        "prompts/list"
    );
    for method in ["resources/list", "resources/templates/list"] {
        let d = direct.request(method, json!({}));
        assert_eq!(through.request(method, json!({})), same(&d), "{method}");
    }

    // Tool results, including annotations whose numbers rmcp used to re-spell.
    for (tool, args) in support::everything_result_calls() {
        let d = direct.request("tools/call", json!({"name": tool, "arguments": args}));
        let t = through.request(
            "tools/call",
            json!({"name": format!("everything__{tool}"), "arguments": args}),
        );
        assert_eq!(t, same(&d), "tools/call {tool}");
    }

    // Prompts, resource reads and completions.
    for (name, args) in [
        ("simple-prompt", json!({})),
        ("args-prompt", json!({"city": "Lyon", "state": "Rhône"})),
    ] {
        let d = direct.request("prompts/get", json!({"name": name, "arguments": args}));
        let t = through.request(
            "prompts/get",
            json!({"name": format!("everything__{name}"), "arguments": args}),
        );
        assert_eq!(t, same(&d), "prompts/get {name}");
    }
    for uri in [
        "demo://resource/static/document/features.md",
        "demo://resource/dynamic/text/3",
        "demo://resource/dynamic/blob/4",
    ] {
        let d = direct.request("resources/read", json!({"uri": uri}));
        let t = through.request("resources/read", json!({"uri": uri}));
        // A dynamic resource says the time of day to the second: when that second turned
        // between the two reads, the direct one is read again (Palisade's came between).
        let d = if t != d && uri.contains("/dynamic/") {
            direct.request("resources/read", json!({"uri": uri}))
        } else {
            d
        };
        assert_eq!(t, same(&d), "resources/read {uri}");
    }
    let d = direct.request(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "completable-prompt"},
               "argument": {"name": "department", "value": "E"}}),
    );
    let t = through.request(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "everything__completable-prompt"},
               "argument": {"name": "department", "value": "E"}}),
    );
    assert_eq!(t, same(&d), "completion/complete");
}

#[test]
fn server_filesystem_tools_through_palisade_are_its_own_json() {
    let ws = Workspace::new();
    let dir = ws.path().join("files");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let dir = std::fs::canonicalize(&dir).expect("canonical");
    let args = json!([node_server("server-filesystem"), dir.display().to_string()]);
    let mut cmd = Command::new("node");
    cmd.args(
        args.as_array()
            .expect("args")
            .iter()
            .filter_map(Value::as_str),
    )
    .stderr(Stdio::null());
    let mut direct = Lines::spawn(&mut cmd);
    let mut through = serve(&ws, json!({"files": {"command": "node", "args": args}}));
    let tools = direct.request("tools/list", json!({}));
    let got = through.request("tools/list", json!({}));
    assert_eq!(got, renamed(&tools, "tools", "files"), "tools/list");
}

/// `palisade serve -- CMD ARGS`: one server, its names its own, its JSON unchanged, its
/// `serverInfo` and `instructions` the agent's first sight of it; and still policed and
/// audited (the call is in the audit log under the server's name).
#[test]
fn one_server_mode_is_the_server_itself() {
    let ws = Workspace::new();
    let mut direct = Lines::spawn(&mut everything_cmd());
    let audit = ws.path().join("audit.jsonl");
    let mut c = Command::new(palisade());
    c.arg("serve")
        .arg("--sandbox-policy")
        .arg("warn")
        .arg("--sandbox-dir")
        .arg(ws.path().join("sandbox"))
        .arg("--policy")
        .arg(support::allow_all_policy())
        .arg("--audit-log")
        .arg(&audit)
        .arg("--")
        .arg("node")
        .arg(node_server("server-everything"))
        .arg("stdio")
        .env_remove("RUST_LOG")
        .stderr(std::fs::File::create(ws.errlog()).expect("errlog"));
    let mut through = Lines::spawn(&mut c);
    // The agent meets the server: its name, version and instructions, not Palisade's.
    let (d, t) = met(&direct, &through);
    assert_eq!(t["instructions"], d["instructions"], "{t}");
    for method in ["tools/list", "prompts/list", "resources/list"] {
        let d = direct.request(method, json!({}));
        assert_eq!(through.request(method, json!({})), same(&d), "{method}");
    }
    let args = json!({"name": "echo", "arguments": {"message": "one server"}});
    let d = direct.request("tools/call", args.clone());
    assert_eq!(
        through.request("tools/call", args),
        same(&d),
        "tools/call echo"
    );
    drop(through);
    let call = record_of(&audit, "echo");
    assert_eq!(call["serverName"], "server-everything", "{call}");
}

/// Under tool pinning the one server's instructions are not relayed: the pins review covers
/// its tool definitions, and instructions are server-written text it could change unreviewed.
/// Its name still is.
#[test]
fn one_server_under_pinning_keeps_its_instructions_back() {
    let ws = Workspace::new();
    let direct = Lines::spawn(&mut everything_cmd());
    let mut servers = support::everything_servers();
    servers["everything"]["prefix"] = json!(false);
    let through = serve_with(&ws, servers, json!({"pins": ws.path().join("pins.json")}));
    let (d, t) = met(&direct, &through);
    assert_ne!(t["instructions"], d["instructions"], "{t}");
    assert!(
        t["instructions"]
            .as_str()
            .is_some_and(|i| i.contains("not relayed")),
        "{t}"
    );
}

/// Notifications too reach the agent as the server wrote them: server-everything's progress
/// through Palisade equals its progress direct, byte for byte (Palisade's own token put back
/// as the agent's); before, rmcp's typed model made `"progress":1` into `1.0` and moved the
/// token first. A log message and a resource update from the raw test server keep their
/// number spellings and unknown fields; only the logger gets the server's name before it.
#[test]
fn notifications_reach_the_agent_as_the_server_wrote_them() {
    let ws = Workspace::new();
    let mut direct = Lines::spawn(&mut everything_cmd());
    let mut through = serve(&ws, support::everything_servers());
    let call = |name: &str| {
        json!({"name": name, "arguments": {"duration": 0.2, "steps": 2},
               "_meta": {"progressToken": "tok-7"}})
    };
    direct.request("tools/call", call("trigger-long-running-operation"));
    through.request(
        "tools/call",
        call("everything__trigger-long-running-operation"),
    );
    let want = direct.notes_of("notifications/progress", 2);
    assert!(want[0].contains(r#""progress":1"#), "{want:?}");
    assert_eq!(through.notes_of("notifications/progress", 2), want);
    drop(through);

    // (Alone: server-everything logs too, at times of its own.)
    let server = support::repo("tests/servers/faulty_server.py");
    let mut through = serve(
        &Workspace::new(),
        json!({"faulty": {"command": support::python(), "args": [server]}}),
    );
    through.request(
        "tools/call",
        json!({"name": "faulty__notify_lines", "arguments": {}}),
    );
    assert_eq!(
        through.notes_of("notifications/message", 1),
        [
            r#"{"level":"info","logger":"faulty/x.y","data":{"n":1e3,"big":12345678901234567890123},"future":[1.50]}"#
        ]
    );
    assert_eq!(
        through.notes_of("notifications/resources/updated", 1),
        [r#"{"uri":"line://request","future":{"q":2.50}}"#]
    );
}

/// The `initialize` results direct and through Palisade, once they are seen to name the
/// same server and the server is seen to give instructions (so a test of them cannot pass
/// on a server that gives none).
fn met(direct: &Lines, through: &Lines) -> (Value, Value) {
    let (d, t): (Value, Value) = (
        serde_json::from_str(&direct.init).expect("JSON"),
        serde_json::from_str(&through.init).expect("JSON"),
    );
    assert_eq!(t["serverInfo"], d["serverInfo"], "{t}");
    assert!(d["instructions"].is_string(), "{d}");
    (d, t)
}
