//! The fast path's bytes: the server's own results to the agent, the agent's own params to
//! the server.

use super::client::*;
use super::*;
use serde_json::value::RawValue;

// The fast path relays the server's own bytes: each tool result of server-everything reaches
// the HTTP agent exactly as the server wrote it (rmcp's typed path re-spells and drops
// fields), as one JSON body. Also under an `elicit` approver, whose questions go on the
// call's own stream (the answer is then streamed, so it has no length): such calls went
// through rmcp's path before and came re-typed.
#[test]
fn http_call_results_are_the_servers_own_bytes() {
    for approver in [None, Some("elicit")] {
        let ws = Workspace::new();
        let config = ws.config(support::everything_servers(), escalation(approver));
        let front = Front::start(&ws, &config);
        let session = front.session(json!({}));
        let mut direct = Direct::start();
        let mut id = 1;
        let mut differ = Vec::new();
        let calls = support::everything_result_calls();
        for (tool, args) in &calls {
            id += 1;
            let d = direct.request(id, "tools/call", json!({"name": tool, "arguments": args}));
            let t = front.call(&session, id, &format!("everything__{tool}"), args.clone());
            assert_eq!(t.status, 200, "{tool}: {t:?}");
            if approver.is_none() {
                assert!(t.fast(), "{tool} was not answered by the fast path: {t:?}");
            }
            assert_eq!(t.json()["id"], json!(id), "{t:?}");
            if t.result_text() != d {
                differ.push(format!(
                    "{approver:?} {tool}:\n  direct {d}\n  http   {}",
                    t.result_text()
                ));
            }
        }
        front.stop();
        assert!(differ.is_empty(), "{}", differ.join("\n"));
        assert_eq!(
            served(&ws, "tools/call"),
            calls.len(),
            "{approver:?}: calls on the fast path"
        );
    }
}

// The lists too: over HTTP each is the server's own JSON, names rewritten, as over stdio.
// rmcp's typed `ServerHandler` answered them before, and dropped every tool's `execution`
// (server-everything's task-only tool then looked like any other). Also under an `elicit`
// approver, which sends calls to rmcp's path: a list asks no one anything.
#[test]
fn http_lists_are_the_servers_own_json() {
    for approver in [None, Some("elicit")] {
        let ws = Workspace::new();
        let config = ws.config(support::everything_servers(), escalation(approver));
        let front = Front::start(&ws, &config);
        let session = front.session(json!({}));
        let mut direct = Direct::start();
        let lists = [
            ("tools/list", Some("tools")),
            ("prompts/list", Some("prompts")),
            ("resources/list", None),
            ("resources/templates/list", None),
        ];
        let mut answers = Vec::new();
        for (id, (method, named)) in (1..).zip(lists) {
            let d = direct.request(id, method, json!({}));
            let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}});
            let t = front.post(Some(&session), &[], &body);
            let expected = match named {
                Some(list) => support::renamed(&d, list, "everything"),
                None => support::same(&d),
            };
            answers.push((method, t, expected));
        }
        // A list with no params at all, and one with a cursor (every list is given whole).
        let bare = front.post(
            Some(&session),
            &[],
            &json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}),
        );
        let cursor = front.post(
            Some(&session),
            &[],
            &json!({"jsonrpc": "2.0", "id": 10, "method": "tools/list",
                    "params": {"cursor": "next"}}),
        );
        front.stop();
        for (method, t, expected) in &answers {
            assert_eq!(t.status, 200, "{approver:?} {method}: {t:?}");
            assert!(
                t.fast(),
                "{approver:?} {method} was not answered by the fast path: {t:?}"
            );
            assert_eq!(&t.result_text(), expected, "{approver:?} {method}");
        }
        let tools = &answers[0].2;
        for other in [&bare, &cursor] {
            assert!(other.fast(), "{approver:?}: {other:?}");
            assert_eq!(&other.result_text(), tools, "{approver:?}");
        }
        let listed: Value = serde_json::from_str(tools).unwrap();
        assert!(
            listed["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["execution"]["taskSupport"] == "required"),
            "no task-only tool kept its `execution`: {tools}"
        );
    }
}

// A 2026-07-28 agent over HTTP has no session, so rmcp answered each of its requests
// through the typed `ServerHandler`, which re-spelt tool results (`priority` 1 as 1.0) and
// dropped every tool's `execution`. The fast path answers them as stdio answers a
// 2026-07-28 agent: each tool result of server-everything and each list is the server's own
// JSON (names rewritten), with only what a 2026-07-28 result must carry added at its end.
#[test]
fn a_2026_agents_requests_over_http_get_the_servers_own_json() {
    let ws = Workspace::new();
    let config = everything_config(&ws);
    let front = Front::start(&ws, &config);
    let mut direct = Direct::start();
    let post = |id: u64, method: &str, name: Option<&str>, mut params: Value| {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        });
        let mut headers = vec![
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", method),
        ];
        headers.extend(name.map(|n| ("Mcp-Name", n)));
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        front.post(None, &headers, &body)
    };
    // The direct result with members added at its end, as the fast path must send it.
    let ended = |direct: String, members: &[(&str, Value)]| {
        let mut v: Value = serde_json::from_str(&direct).unwrap();
        for (k, m) in members {
            v.as_object_mut().unwrap().insert(k.to_string(), m.clone());
        }
        v.to_string()
    };
    let complete = ("resultType", json!("complete"));
    let mut answers = Vec::new();
    let mut id = 1;
    for (tool, args) in support::everything_result_calls() {
        id += 1;
        let d = direct.request(id, "tools/call", json!({"name": tool, "arguments": args}));
        let name = format!("everything__{tool}");
        let t = post(
            id,
            "tools/call",
            Some(&name),
            json!({"name": name, "arguments": args}),
        );
        answers.push((
            format!("tools/call {tool}"),
            t,
            ended(d, std::slice::from_ref(&complete)),
        ));
    }
    let cached = [
        complete.clone(),
        ("ttlMs", json!(0)),
        ("cacheScope", json!("private")),
    ];
    for (method, named) in [("tools/list", Some("tools")), ("resources/list", None)] {
        id += 1;
        let d = direct.request(id, method, json!({}));
        let d = match named {
            Some(list) => support::renamed(&d, list, "everything"),
            None => support::same(&d),
        };
        let t = post(id, method, None, json!({}));
        answers.push((method.to_string(), t, ended(d, &cached)));
    }
    front.stop();
    let mut differ = Vec::new();
    for (what, t, expected) in &answers {
        assert_eq!(t.status, 200, "{what}: {t:?}");
        assert!(t.fast(), "{what} was not answered by the fast path: {t:?}");
        if &t.result_text() != expected {
            differ.push(format!(
                "{what}:\n  expected {expected}\n  http     {}",
                t.result_text()
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    let tools = answers.iter().find(|(w, ..)| w == "tools/list").unwrap();
    assert!(
        tools
            .1
            .result_text()
            .contains(r#""taskSupport":"required""#),
        "no task-only tool kept its `execution`: {}",
        tools.1.result_text()
    );
}

// The fast path forwards a call's params as the agent wrote them, as stdio does: numbers
// keep their spelling (an integer past 2^64 stays that integer), keys their order; only the
// tool's name is the server's. The server answers with the line it read (a raw JSON-lines
// server: one from npm or PyPI decodes what it reads before a tool sees it).
#[test]
fn fast_calls_reach_the_server_as_the_agent_wrote_them() {
    let ws = Workspace::new();
    let server = support::repo("tests/servers/faulty_server.py");
    let config = ws.config(
        json!({"faulty": {"command": support::python(), "args": [server]}}),
        json!({}),
    );
    let front = Front::start(&ws, &config);
    let session = front.session(json!({}));
    let params = r#"{"name":"faulty__request_line","arguments":{"count":12345678901234567890123,"after":1e3,"text":"\u00e9"},"_meta":{"x.example/trace":[1.50]}}"#;
    let body = format!(r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{params}}}"#);
    let answer = front.post_text(ALICE, Some(&session), &[], &body);
    front.stop();
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.fast(), "not answered by the fast path: {answer:?}");
    let seen = answer.json()["result"]["content"][0]["text"]
        .as_str()
        .expect("the line the server read")
        .to_string();
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        params: &'a RawValue,
    }
    let request: Request<'_> = serde_json::from_str(&seen).expect("a JSON-RPC request");
    assert_eq!(
        request.params.get(),
        params.replace("faulty__request_line", "request_line"),
        "the server read: {seen}"
    );
}

// The routed requests take the fast path too, their params forwarded as the agent wrote
// them (through rmcp's path, unknown fields were dropped and `1e3` became `1000.0`), one
// asking for progress too (answered on a stream of its own).
#[test]
fn fast_routed_requests_reach_the_server_as_the_agent_wrote_them() {
    let ws = Workspace::new();
    let server = support::repo("tests/servers/faulty_server.py");
    let config = ws.config(
        json!({"faulty": {"command": support::python(), "args": [server],
                          "env": {"FAULTY_ECHO_LINES": "1"}}}),
        json!({}),
    );
    let front = Front::start(&ws, &config);
    let session = front.session(json!({}));
    let post = |id: u64, method: &str, params: &str| {
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#);
        front.post_text(ALICE, Some(&session), &[], &body)
    };
    let prompt = r#"{"name":"faulty__request_line","arguments":{"path":"word"},"future":[1e3]}"#;
    let read = r#"{"uri":"line://request","future":12345678901234567890123}"#;
    let answers = [
        (
            post(5, "prompts/get", prompt),
            "/result/messages/0/content/text",
        ),
        (post(6, "resources/read", read), "/result/contents/0/text"),
    ];
    let progress = post(
        7,
        "resources/read",
        r#"{"uri":"line://request","_meta":{"progressToken":"p"}}"#,
    );
    front.stop();
    let expected = [
        prompt.replace("faulty__request_line", "request_line"),
        read.to_string(),
    ];
    for ((answer, at), want) in answers.iter().zip(expected) {
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(answer.fast(), "not answered by the fast path: {answer:?}");
        let seen = answer
            .json()
            .pointer(at)
            .and_then(|v| v.as_str().map(String::from));
        let seen = seen.unwrap_or_else(|| panic!("no line in {answer:?}"));
        #[derive(serde::Deserialize)]
        struct Request<'a> {
            #[serde(borrow)]
            params: &'a RawValue,
        }
        let request: Request<'_> = serde_json::from_str(&seen).expect("a JSON-RPC request");
        assert_eq!(request.params.get(), want, "the server read: {seen}");
    }
    assert_eq!(progress.status, 200, "{progress:?}");
    let seen = progress.json()["result"]["contents"][0]["text"].clone();
    assert!(
        seen.as_str()
            .is_some_and(|l| l.contains(r#""progressToken":"#)),
        "the server read: {seen}"
    );
    assert_eq!(served(&ws, "resources/read"), 2, "{}", ws.stderr_text());
}

// A call asking for progress takes the fast path too: its answer is a stream on which the
// server's progress notifications come first, as the server wrote them with the agent's
// token put back, then the result. Before, rmcp's session carried them, re-typed
// (`"progress":1` arrived as `1.0`, the token moved first).
#[test]
fn progress_reaches_an_http_agent_as_the_server_wrote_it() {
    let ws = Workspace::new();
    let config = everything_config(&ws);
    let front = Front::start(&ws, &config);
    let session = front.session(json!({}));
    let mut direct = Direct::start();
    let (args, meta) = (
        json!({"duration": 0.2, "steps": 2}),
        json!({"progressToken": "tok-7"}),
    );
    let d = direct.request(
        1,
        "tools/call",
        json!({"name": "trigger-long-running-operation", "arguments": args, "_meta": meta}),
    );
    let t = front.post(
        Some(&session),
        &[],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "everything__trigger-long-running-operation",
                           "arguments": args, "_meta": meta}}),
    );
    front.stop();
    assert_eq!(t.status, 200, "{t:?}");
    let want = notes_of(&direct.notes, "notifications/progress");
    assert_eq!(want.len(), 2, "{:?}", direct.notes);
    assert!(want[0].contains(r#""progress":1"#), "{want:?}");
    assert_eq!(t.notes_of("notifications/progress"), want, "{t:?}");
    assert_eq!(t.result_text(), d, "{t:?}");
    assert_eq!(served(&ws, "tools/call"), 1, "{}", ws.stderr_text());
}

// An extension's request over HTTP (rmcp's path: the fast path takes only the methods it
// knows) still reaches the server that keeps its own names, and its answer comes back.
#[test]
fn an_extensions_request_over_http_reaches_the_server_that_keeps_its_own_names() {
    let ws = Workspace::new();
    let server = support::repo("tests/servers/faulty_server.py");
    let config = ws.config(
        json!({"faulty": {"command": support::python(), "args": [server], "prefix": false,
                          "env": {"FAULTY_ECHO_LINES": "1"}}}),
        json!({}),
    );
    let front = Front::start(&ws, &config);
    let session = front.session(json!({}));
    let answer = front.post(
        Some(&session),
        &[],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "x.example/echo",
                "params": {"q": [1, "two"]}}),
    );
    front.stop();
    assert_eq!(answer.status, 200, "{answer:?}");
    let seen = answer.json()["result"]["line"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| panic!("no line in {answer:?}"));
    let read: Value = serde_json::from_str(&seen).expect("a JSON-RPC request");
    assert_eq!(read["method"], "x.example/echo", "{read}");
    assert_eq!(read["params"], json!({"q": [1, "two"]}), "{read}");
}

// A server's log message and resource update reach an HTTP agent on its session's GET
// stream as the server wrote them: every member in its order, and `1e3`, `1.50` and an
// integer past 2^64 as spelt; only the logger is made Palisade's. Palisade writes them on
// that stream itself, with no event id (rmcp reads a reconnecting agent's `Last-Event-ID` as
// its own). Before, rmcp's session wrote them from its typed message: `1000.0`, `1.5`,
// `1.2345678901234568e+22`. Sent while no GET is open, they go through rmcp's session,
// which keeps them for the agent's next GET: they still arrive, re-spelt, with all their
// members.
#[test]
fn a_servers_notifications_reach_an_http_agent_with_all_their_members() {
    let ws = Workspace::new();
    let front = Front::start(&ws, &faulty_config(&ws, json!({})));
    let session = front.session(json!({}));
    let mut stream = front.open_get(&session);
    let sent = front.call(&session, 1, "faulty__notify_lines", json!({}));
    assert_eq!(sent.status, 200, "{sent:?}");
    let events = next_events(&mut stream, 2);
    let messages: Vec<String> = events.iter().map(|(_, data)| data.clone()).collect();
    assert_eq!(
        notes_of(&messages, "notifications/message"),
        [LOG_AS_WRITTEN],
        "{messages:?}"
    );
    assert_eq!(
        notes_of(&messages, "notifications/resources/updated"),
        [r#"{"uri":"line://request","future":{"q":2.50}}"#],
        "{messages:?}"
    );
    assert!(
        events.iter().all(|(id, _)| id.is_none()),
        "no event id of Palisade's: {events:?}"
    );

    // A session with no GET open: through rmcp's session, kept for its first GET.
    drop(stream);
    let quiet = front.session(json!({}));
    let sent = front.call(&quiet, 2, "faulty__notify_lines", json!({}));
    assert_eq!(sent.status, 200, "{sent:?}");
    let mut later = front.open_get(&quiet);
    let messages: Vec<String> = next_events(&mut later, 2)
        .into_iter()
        .map(|(_, data)| data)
        .collect();
    assert_eq!(
        notes_of(&messages, "notifications/message"),
        [
            r#"{"level":"info","logger":"faulty/x.y","data":{"n":1000.0,"big":1.2345678901234568e+22},"future":[1.5]}"#
        ],
        "{messages:?}"
    );
    front.stop();
}

// The Python SDK opens its GET before it posts `notifications/initialized` (its streamable
// HTTP client starts the GET stream first), so the GET often comes before the session is
// registered. That GET takes the session's stream when it registers: a server's
// notification arrives as the server wrote it. Before, that GET carried rmcp's re-encoded
// events for its life (`1000.0` for `1e3`).
#[test]
fn a_get_sent_before_initialized_carries_the_servers_own_text() {
    let ws = Workspace::new();
    let front = Front::start(&ws, &faulty_config(&ws, json!({})));
    let (session, _) = front.initialize(json!({}));
    let mut stream = front.open_get(&session);
    front.initialized(&session);
    let sent = front.call(&session, 1, "faulty__notify_lines", json!({}));
    assert_eq!(sent.status, 200, "{sent:?}");
    let messages: Vec<String> = next_events(&mut stream, 2)
        .into_iter()
        .map(|(_, data)| data)
        .collect();
    assert_eq!(
        notes_of(&messages, "notifications/message"),
        [LOG_AS_WRITTEN],
        "{messages:?}"
    );
    front.stop();
}

/// The params of the log message `faulty__notify_lines` makes its server send, as it spells
/// them (`1e3`, an integer past 2^64, `1.50`).
const LOG_AS_WRITTEN: &str = r#"{"level":"info","logger":"faulty/x.y","data":{"n":1e3,"big":12345678901234567890123},"future":[1.50]}"#;

/// The next `count` SSE events carrying a JSON message on `stream`: each one's `id:` (if
/// any) and its data.
fn next_events(
    stream: &mut std::io::BufReader<std::net::TcpStream>,
    count: usize,
) -> Vec<(Option<String>, String)> {
    use std::io::BufRead;
    let mut got = Vec::new();
    let (mut id, mut data) = (None, None::<String>);
    while got.len() < count {
        let mut line = String::new();
        let n = stream.read_line(&mut line).expect("the stream stays open");
        assert!(n > 0, "the stream ended after {got:?}");
        let line = line.trim_end();
        if let Some(v) = line.strip_prefix("id:") {
            id = Some(v.trim().to_string());
        } else if let Some(v) = line.strip_prefix("data:") {
            data = Some(v.trim_start().to_string());
        } else if line.is_empty() {
            if let Some(d) = data
                .take()
                .filter(|d| serde_json::from_str::<Value>(d).is_ok())
            {
                got.push((id.take(), d));
            }
            id = None;
        }
    }
    got
}

/// Settings with an approval chain (`escalation`), or none.
fn escalation(approver: Option<&str>) -> Value {
    match approver {
        Some(chain) => json!({"escalation": chain}),
        None => json!({}),
    }
}

// A server's sampling request during a session's call goes on that call's own stream, and
// the agent's answer (a POST on the same session) reaches the server as the agent wrote it:
// an unknown member, `1e3`, an integer past 2^64 and `1.50` unchanged. The server is the
// raw JSON-lines test server, which answers its call with the response line it read. An
// answer pretty-printed across lines (legal in a POST body) reaches the server as one compact
// line with the same members: a line break inside it would have split the server's message.
#[test]
fn a_sampling_answer_reaches_the_server_as_the_http_agent_wrote_it() {
    use std::io::Read;
    let ws = Workspace::new();
    let (front, session) = sampling_session(&ws);
    let answered_with = |id: u64, result: &str| -> String {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": "faulty__sampling_line", "arguments": {}}});
        let conn = front.open_post(ALICE, Some(&session), &[], &body.to_string());
        let mut stream = std::io::BufReader::new(conn);
        let asked: Value = serde_json::from_str(&next_messages(&mut stream, 1)[0]).unwrap();
        assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
        let reply = format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{result}}}"#,
            asked["id"]
        );
        let posted = front.post_text(ALICE, Some(&session), &[], &reply);
        assert_eq!(posted.status, 202, "{posted:?}");
        let answer: Value = serde_json::from_str(&next_messages(&mut stream, 1)[0]).unwrap();
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        assert_eq!(answer["id"], json!(id), "{answer}");
        support::response_result_in(&answer["result"])
    };
    let answer = SAMPLING_AS_WRITTEN;
    assert_eq!(answered_with(5, answer), answer);
    let pretty = "{\n  \"x\": {\"jsonrpc\": \"2.0\", \"method\": \"tools/call\"},\n  \"role\": \"assistant\",\n  \"content\": {\"type\": \"text\", \"text\": \"t\"},\n  \"model\": \"m\"\n}";
    let got = answered_with(6, pretty);
    assert!(!got.contains('\n'), "{got:?}");
    assert_eq!(
        serde_json::from_str::<Value>(&got).unwrap(),
        serde_json::from_str::<Value>(pretty).unwrap()
    );
    front.stop();
}

// A server's sampling request with no call of its own in flight goes to the agent on its
// session's standalone stream (the GET), written by Palisade (its id is Palisade's), and the
// agent's answer, a POST on the session after that GET has closed, reaches the server as the
// agent wrote it: an unknown member, `1e3`, an integer past 2^64 and `1.50` unchanged.
// Through rmcp's session (the previous build) the request carried rmcp's number id and the
// answer was re-encoded from its typed `ClientResult`.
#[test]
fn a_servers_request_between_calls_is_answered_as_the_http_agent_wrote_it() {
    question_between_calls_answered_with(&[]);
}

// The same, the answer's POST adding weights to its `Accept` (headers rmcp accepts but the
// fast path leaves to rmcp for a request). Before, rmcp's session took that answer to a
// question it never asked and dropped it: the server never got it.
#[test]
fn an_answer_whose_accept_has_weights_still_reaches_the_server() {
    question_between_calls_answered_with(&[("Accept", "text/event-stream;q=0.5")]);
}

/// A sampling question put on the session's GET between calls, answered by a POST with
/// `extra` headers after that GET has closed: the server gets the answer as written.
fn question_between_calls_answered_with(extra: &[(&str, &str)]) {
    let ws = Workspace::new();
    let (front, session) = sampling_session(&ws);
    let mut stream = front.open_get(&session);
    let later = front.call(&session, 1, "faulty__sampling_later", json!({"after": 0.3}));
    assert_eq!(later.status, 200, "{later:?}");
    assert!(later.message.contains("later"), "{later:?}");

    // The call has been answered: the request rides the standalone stream.
    let asked: Value = serde_json::from_str(&next_messages(&mut stream, 1)[0]).unwrap();
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    let id = asked["id"].as_str().unwrap_or_default().to_string();
    assert!(
        id.starts_with("palisade-question-"),
        "Palisade's own question: {asked}"
    );
    // The GET goes (a client reconnecting it, say) before the answer: the answer comes by
    // a POST of its own, and the question still waits for it.
    drop(stream);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let answer = SAMPLING_AS_WRITTEN;
    let reply = format!(r#"{{"jsonrpc":"2.0","id":"{id}","result":{answer}}}"#);
    let posted = front.post_text(ALICE, Some(&session), extra, &reply);
    assert_eq!(posted.status, 202, "{posted:?}");

    // The server kept the response's line as it read it.
    let mut n = 2;
    let mut kept = Value::Null;
    let answered = support::eventually(HANG_GUARD, || {
        n += 1;
        let got = front.call(&session, n, "faulty__later_line", json!({}));
        let Ok(result) = serde_json::from_str::<Value>(&got.message) else {
            return false;
        };
        kept = result["result"].clone();
        kept["content"][0]["text"] != "not yet"
    });
    assert!(answered, "the server's request was never answered: {kept}");
    let line = kept;
    assert_eq!(support::response_result_in(&line), answer);
    front.stop();
}

/// A front whose faulty server may relay sampling, and a session that declared sampling.
fn sampling_session(ws: &Workspace) -> (Front, String) {
    let server = support::repo("tests/servers/faulty_server.py");
    let servers = json!({"faulty": {"command": support::python(), "args": [server],
                                    "relay": {"sampling": true}}});
    let front = Front::start(ws, &ws.config(servers, json!({})));
    let session = front.session(json!({"sampling": {}}));
    (front, session)
}

/// A sampling result as an agent may write it: an unknown member, `1e3`, an integer past
/// 2^64, an escape and `1.50`, each of which a decode and re-encode would change.
const SAMPLING_AS_WRITTEN: &str = r#"{"x.example/first":{"n":1e3,"big":12345678901234567890123},"role":"assistant","content":{"type":"text","text":"caf\u00e9"},"model":"m","stopReason":"endTurn","_meta":{"k":1.50}}"#;
