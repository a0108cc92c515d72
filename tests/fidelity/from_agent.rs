//! What the agent writes reaches the server as it wrote it: a call's params, the routed
//! requests and an extension's messages; and what `serve` refuses to start with.

use super::*;

/// The other direction: a call's params reach a real server process (sandboxed, through
/// `palisade serve`) as the agent wrote them. Numbers keep their spelling (an integer past
/// 2^64 stays that integer, not the nearest float), keys their order, unknown fields stay;
/// only the tool's name is the server's. The server is the raw JSON-lines test server
/// (`tests/servers/faulty_server.py`): a server from npm or PyPI decodes what it reads
/// before any tool sees it, so it cannot show the bytes it was sent.
#[test]
fn a_calls_params_reach_the_server_as_the_agent_wrote_them() {
    let ws = Workspace::new();
    let server = support::repo("tests/servers/faulty_server.py");
    let mut through = serve(
        &ws,
        json!({"faulty": {"command": support::python(), "args": [server]}}),
    );
    let params = r#"{"name":"faulty__request_line","future":{"q":1.50},"arguments":{"count":12345678901234567890123,"after":1e3,"text":"é"},"_meta":{"x.example/trace":[1e3]}}"#;
    let line = format!(r#"{{"jsonrpc":"2.0","id":1000,"method":"tools/call","params":{params}}}"#);
    let result: Value =
        serde_json::from_str(&through.request_line(1000, "tools/call", &line)).expect("a result");
    let seen = result["content"][0]["text"]
        .as_str()
        .expect("the line the server read");
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        params: &'a RawValue,
    }
    let request: Request<'_> = serde_json::from_str(seen).expect("a JSON-RPC request");
    assert_eq!(
        request.params.get(),
        params.replace("faulty__request_line", "request_line"),
        "the server read: {seen}"
    );
}

/// A server's sampling request, relayed to an agent on stdio, gets the agent's answer as the
/// agent wrote it: members no model knows, their order, `1e3`, an integer past 2^64 and an
/// escaped character reach the server unchanged. The server is the raw JSON-lines test
/// server, which answers its call with the response line it read. Before, the answer came
/// back through rmcp's `ClientResult`, whose sampling model dropped the unknown member and
/// re-spelt the numbers.
#[test]
fn a_sampling_answer_reaches_the_server_as_the_agent_wrote_it() {
    let ws = Workspace::new();
    let server = support::repo("tests/servers/faulty_server.py");
    let servers = json!({"faulty": {"command": support::python(), "args": [server],
                                    "relay": {"sampling": true}}});
    let mut through = Lines::spawn_declaring(
        &mut serve_cmd(&ws, servers, json!({})),
        json!({"roots": {"listChanged": true}, "sampling": {}}),
    );
    let answer = r#"{"x.example/first":{"n":1e3,"big":12345678901234567890123},"role":"assistant","content":{"type":"text","text":"caf\u00e9"},"model":"m","stopReason":"endTurn","_meta":{"k":1.50}}"#;
    let mut sampled = |answer: &str| -> String {
        through.answers = vec![("sampling/createMessage".into(), answer.into())];
        let result: Value = serde_json::from_str(&through.request(
            "tools/call",
            json!({"name": "faulty__sampling_line", "arguments": {}}),
        ))
        .expect("a result");
        support::response_result_in(&result)
    };
    assert_eq!(sampled(answer), answer);
    // An answer with a carriage return between its tokens, around a request of its own (a
    // server reading with universal newlines would take that for a line of its own): the
    // server reads it as one compact line, the same members.
    let smuggling = "{\"x\":\r{\"jsonrpc\":\"2.0\",\"id\":\"e\",\"method\":\"tools/call\"}\r,\"role\":\"assistant\",\"content\":{\"type\":\"text\",\"text\":\"t\"},\"model\":\"m\"}";
    assert_eq!(sampled(smuggling), smuggling.replace('\r', ""));
    // The request itself reached the agent in the server's words (its numbers' spelling, a
    // member no model knows, their order), `_meta` Palisade's own. Before, it went through
    // serde's `Value`: `1.50` became `1.5`.
    let asked: Value = serde_json::from_str(&through.asked[0]).unwrap();
    let params = through.asked[0]
        .split_once(r#""params":"#)
        .map(|(_, p)| p.trim_end().trim_end_matches('}').to_string())
        .unwrap_or_default();
    assert_eq!(asked["method"], "sampling/createMessage");
    assert!(
        params.starts_with(
            r#"{"messages":[{"role":"user","content":{"type":"text","text":"hi","x.example/n":1.50}}],"maxTokens":10,"temperature":0.70,"_meta":"#
        ),
        "{}",
        through.asked[0]
    );
}

/// A method Palisade does not know (an extension's) passes to the server that keeps its own
/// names (`prefix: false`), in both directions, as written: a request reaches it (only its
/// progress token Palisade's) and its answer comes back, audited with the method as
/// `toolName`; a notification reaches it, and the server's own notification reaches the agent
/// as the server wrote it. Before, the request got "method not found" and both notifications
/// were dropped; then they went through rmcp's `Value` (`1e3` made `1000.0`).
#[test]
fn extensions_pass_to_the_server_that_keeps_its_own_names() {
    let ws = Workspace::new();
    let audit = ws.path().join("audit.jsonl");
    let mut servers = faulty_echoing();
    servers["faulty"]["prefix"] = json!(false);
    let mut through = serve_with(
        &ws,
        servers,
        json!({"auditLog": audit.display().to_string()}),
    );
    // Its params reach the server as written; only the progress token is Palisade's own.
    let params = r#"{"q":[1,"two",1e3],"big":12345678901234567890123,"_meta":{"k":true,"progressToken":"pt"}}"#;
    let line =
        format!(r#"{{"jsonrpc":"2.0","id":31,"method":"x.example/echo","params":{params}}}"#);
    let result: Value =
        serde_json::from_str(&through.request_line(31, "x.example/echo", &line)).expect("a result");
    let seen = result["line"].as_str().expect("the line read");
    let read: Value = serde_json::from_str(seen).expect("a JSON-RPC request");
    assert_eq!(read["method"], "x.example/echo", "{read}");
    let (kept, token) = params.split_once(r#""pt""#).expect("a token");
    let sent = params_read(seen);
    assert!(
        sent.starts_with(kept) && sent.ends_with(token) && !sent.contains(r#""pt""#),
        "the server read: {seen}"
    );

    through.send_text(r#"{"jsonrpc":"2.0","method":"x.example/ping","params":{"p":7,"n":1.50}}"#);
    let pong = through.notes_of("x.example/pong", 1);
    let pong: Value = serde_json::from_str(&pong[0]).expect("JSON");
    let ping = pong["line"].as_str().expect("the line read");
    assert_eq!(params_read(ping), r#"{"p":7,"n":1.50}"#, "{ping}");
    assert!(
        through.notes_of("x.example/pong", 1)[0].ends_with(r#","n":1e3}"#),
        "the server's own spelling"
    );
    drop(through);
    let rec = record_of(&audit, "x.example/echo");
    assert_eq!(rec["kind"], "extension", "{rec}");
    assert_eq!(rec["serverName"], "faulty", "{rec}");
    assert_eq!(rec["arguments"]["q"], json!([1, "two", 1000.0]), "{rec}");
}

/// With every server prefixed there is no server an unknown method could be meant for: it
/// gets "method not found", as before.
#[test]
fn an_unknown_method_among_prefixed_servers_is_not_found() {
    let ws = Workspace::new();
    let mut through = serve(&ws, faulty_echoing());
    let line = r#"{"jsonrpc":"2.0","id":77,"method":"x.example/echo","params":{}}"#;
    let error = through.error_of(77, line);
    assert_eq!(error["code"], -32601, "{error}");
}

/// The routed requests (`prompts/get`, `resources/read`, `resources/(un)subscribe`,
/// `completion/complete`) reach a real server process the same way: as the agent wrote them,
/// only a prompt's name (at the top, or in a completion's `ref`) made the server's. Before,
/// rmcp's typed models dropped the unknown fields and re-spelled the numbers. Params that
/// repeat a key go re-encoded from what the checks read, once. The server is the raw
/// JSON-lines test server, answering each with the line it read (as in
/// `a_calls_params_reach_the_server_as_the_agent_wrote_them`).
#[test]
fn routed_requests_reach_the_server_as_the_agent_wrote_them() {
    let ws = Workspace::new();
    let mut through = serve(&ws, faulty_echoing());
    let cases = [
        (
            "prompts/get",
            r#"{"name":"faulty__request_line","arguments":{"path":"word"},"future":{"q":1.50},"_meta":{"x.example/trace":[1e3]}}"#,
            r#"{"name":"request_line","arguments":{"path":"word"},"future":{"q":1.50},"_meta":{"x.example/trace":[1e3]}}"#,
            "/messages/0/content/text",
        ),
        (
            "resources/read",
            r#"{"future":12345678901234567890123,"uri":"line://request","_meta":{}}"#,
            r#"{"future":12345678901234567890123,"uri":"line://request","_meta":{}}"#,
            "/contents/0/text",
        ),
        (
            "resources/subscribe",
            r#"{"uri":"line://request","x":1e3}"#,
            r#"{"uri":"line://request","x":1e3}"#,
            "/_meta/line",
        ),
        (
            "resources/unsubscribe",
            r#"{"uri":"line://request","x":-0.0}"#,
            r#"{"uri":"line://request","x":-0.0}"#,
            "/_meta/line",
        ),
        (
            "completion/complete",
            r#"{"ref":{"type":"ref/prompt","name":"faulty__request_line","v":2.50},"argument":{"name":"path","value":"w"},"future":[1e3]}"#,
            r#"{"ref":{"type":"ref/prompt","name":"request_line","v":2.50},"argument":{"name":"path","value":"w"},"future":[1e3]}"#,
            "/completion/values/0",
        ),
    ];
    for (n, (method, params, expected, answer_at)) in cases.into_iter().enumerate() {
        let id = 2000 + n as u64;
        let line =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#);
        let result: Value =
            serde_json::from_str(&through.request_line(id, method, &line)).expect("a result");
        let seen = result
            .pointer(answer_at)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{method}: no line in {result}"));
        assert_eq!(
            params_read(seen),
            expected,
            "{method}: the server read {seen}"
        );
    }
    // A repeated key: the server reads the one value the checks read, re-encoded.
    let line = r#"{"jsonrpc":"2.0","id":3000,"method":"prompts/get","params":{"name":"faulty__request_line","arguments":{"path":"/etc/shadow"},"arguments":{"path":"word"}}}"#;
    let result: Value =
        serde_json::from_str(&through.request_line(3000, "prompts/get", line)).expect("a result");
    let seen = result["messages"][0]["content"]["text"]
        .as_str()
        .expect("the line the server read");
    let read = params_read(seen);
    assert_eq!(read.matches("\"arguments\"").count(), 1, "{read}");
    let read: Value = serde_json::from_str(&read).expect("JSON");
    assert_eq!(read["arguments"], json!({"path": "word"}), "{read}");
    assert_eq!(read["name"], "request_line", "{read}");
}

/// A 2026-07-28 agent's routed requests go the same way: as it wrote them, its envelope
/// taken out of `_meta`; and their answers are the server's bytes with what a 2026-07-28
/// result must carry added at the end. Before, rmcp's session took them, typed both ways.
#[test]
fn a_2026_agents_routed_requests_reach_the_server_as_it_wrote_them() {
    let ws = Workspace::new();
    let mut through = serve_modern(&ws, faulty_echoing());
    let envelope = r#""io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw-2026","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}"#;
    // The first request (a list, as an agent's is) opens the session, in rmcp's hands.
    let list = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"resources/list","params":{{"_meta":{{{envelope}}}}}}}"#
    );
    through.request_line(1, "resources/list", &list);
    let params = format!(
        r#"{{"uri":"line://request","future":1e3,"_meta":{{{envelope},"x.example/trace":[1.50]}}}}"#
    );
    let line = format!(r#"{{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{params}}}"#);
    let result = through.request_line(2, "resources/read", &line);
    assert!(
        result.ends_with(r#","resultType":"complete","ttlMs":0,"cacheScope":"private"}"#),
        "{result}"
    );
    let v: Value = serde_json::from_str(&result).expect("JSON");
    let seen = v["contents"][0]["text"].as_str().expect("the line read");
    assert_eq!(
        params_read(seen),
        r#"{"uri":"line://request","future":1e3,"_meta":{"x.example/trace":[1.50]}}"#,
        "the server read: {seen}"
    );
}

#[test]
fn serve_refuses_a_config_and_a_command_together_and_neither() {
    let ws = Workspace::new();
    let config = ws.config(json!({}), json!({}));
    let both = Command::new(palisade())
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--", "node", "x.js"])
        .output()
        .expect("run");
    assert!(!both.status.success());
    assert!(
        String::from_utf8_lossy(&both.stderr).contains("not both"),
        "{}",
        String::from_utf8_lossy(&both.stderr)
    );
    let neither = Command::new(palisade()).arg("serve").output().expect("run");
    assert!(!neither.status.success());
    assert!(
        String::from_utf8_lossy(&neither.stderr).contains("nothing to serve"),
        "{}",
        String::from_utf8_lossy(&neither.stderr)
    );
}
