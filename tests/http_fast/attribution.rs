//! Whose a server's request is on the fast path: a sampling request during a call goes on
//! that call's own stream, one during a routed request to its session's own stream, one that
//! could be either of two sessions' is refused, never guessed; an approval question goes to
//! the call's own session, and a call served in no session and no round is denied, not
//! asked of another; a call's end withdraws the question waiting on its stream.

use super::client::*;
use super::*;
use std::io::Read;
use std::net::TcpStream;

// A server's sampling request during a session's call goes on that call's own stream, to the
// client that made the call, although another session of the principal (its most recent, the
// one the principal's link points at) could answer it too; the client's answer, a POST of a
// JSON-RPC response on its session, reaches the server, and the call ends with the server's
// result on the same stream. Before, the call went through rmcp's path and the request to the
// principal's most recent session's GET stream: the caller's stream never saw it.
#[test]
fn a_servers_request_during_a_call_goes_on_that_calls_own_stream() {
    let ws = Workspace::new();
    let (front, audit) = sampling_front(&ws);
    let caller = front.session(json!({"sampling": {}}));
    let most_recent = front.session(json!({"sampling": {}}));
    let (mut stream, asked) = sampling_asked_of(&front, &caller);
    let id = asked["id"].clone();
    let answer_with = |text: &str| {
        json!({"jsonrpc": "2.0", "id": id,
               "result": {"role": "assistant", "model": "canned",
                          "content": {"type": "text", "text": text}}})
    };
    // The question is the caller's: an answer on the other session is not taken as its.
    let elsewhere = front.post(Some(&most_recent), &[], &answer_with("from-elsewhere"));
    let reply = front.post(Some(&caller), &[], &answer_with("sampled-on-its-stream"));
    assert_eq!(reply.status, 202, "{reply:?}");
    let answer: Value = serde_json::from_str(&next_messages(&mut stream, 1)[0]).unwrap();
    drop(stream);
    let err = ws.stderr_text();
    front.stop();
    assert_eq!(answer["id"], 5, "{answer}");
    let result = answer["result"].to_string();
    assert!(
        result.contains("sampled-on-its-stream") && !result.contains("from-elsewhere"),
        "the server got the caller's answer, not the other session's ({elsewhere:?}): \
         {answer}\n{err}"
    );
    assert_eq!(served(&ws, "tools/call"), 1, "{err}");
    assert!(sampling_recorded(&audit, "success"), "{err}");
    // The server's params as it wrote them (rmcp's typed view read `temperature` as an f32:
    // 0.7 reached the agent as 0.699999988079071), with the server named in `_meta`.
    assert_eq!(asked["params"]["temperature"], json!(0.7), "{asked}");
    assert_eq!(
        asked["params"]["_meta"]["palisade/server"], "everything",
        "{asked}"
    );
}

// The agent cancelling a call whose server's question waits on the call's stream ends both:
// the question is withdrawn from the agent (`notifications/cancelled` naming it), the stream
// closes with no answer, and the question is audited as given up. (Before, the question held
// the stream open, and with it the principal's request slot, until `callTimeout`, 60 s here.)
#[test]
fn cancelling_a_call_ends_the_question_waiting_on_its_stream() {
    let ws = Workspace::new();
    let (front, audit) = sampling_front(&ws);
    let caller = front.session(json!({"sampling": {}}));
    let (mut stream, asked) = sampling_asked_of(&front, &caller);
    let cancel = front.post(
        Some(&caller),
        &[],
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 5}}),
    );
    // Shorter than the stream's keep-alive (15 s), so that a stream left open fails the read.
    stream
        .get_ref()
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut rest = String::new();
    let ended = stream.read_to_string(&mut rest);
    let given_up = support::eventually(HANG_GUARD, || sampling_recorded(&audit, "error"));
    let err = ws.stderr_text();
    front.stop();
    assert_eq!(cancel.status, 202, "{cancel:?}");
    assert!(
        ended.is_ok(),
        "the stream stayed open: {ended:?}\n{rest}\n{err}"
    );
    assert!(
        !rest.contains("\"result\""),
        "a cancelled call gets no answer: {rest}"
    );
    let withdrawn = rest
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .any(|m| {
            m["method"] == "notifications/cancelled" && m["params"]["requestId"] == asked["id"]
        });
    assert!(withdrawn, "the question was not withdrawn: {rest}");
    assert!(given_up, "{err}");
}

// A server's request while calls of two sessions are open to it could be either's: it is
// refused with the reason, never put to the one session whose call could carry it. Session B's
// call is a long operation on its own stream (B may be asked); session A, which cannot be
// asked, triggers a sampling request meanwhile. (Before, only calls that could carry a
// request counted, so the request went to B's stream: B was asked about A's prompt.)
#[test]
fn a_servers_request_that_could_be_either_sessions_is_refused_not_guessed() {
    let ws = Workspace::new();
    let (front, audit) = sampling_front(&ws);
    let a = front.session(json!({}));
    let b = front.session(json!({"sampling": {}}));
    let long = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                      "params": {"name": "everything__trigger-long-running-operation",
                                 "arguments": {"duration": 4, "steps": 4},
                                 "_meta": {"progressToken": "b9"}}});
    let conn = front.open_post(ALICE, Some(&b), &[], &long.to_string());
    let mut b_stream = std::io::BufReader::new(conn);
    // B's call is running once its first progress has come.
    let first = next_messages(&mut b_stream, 1);
    let a_answer = front.call(
        &a,
        5,
        "everything__trigger-sampling-request",
        json!({"prompt": "for A only", "maxTokens": 5}),
    );
    let mut b_saw = first;
    while !b_saw.last().is_some_and(|m| m.contains("\"result\"")) {
        b_saw.extend(next_messages(&mut b_stream, 1));
    }
    let err = ws.stderr_text();
    front.stop();
    assert!(
        b_saw.iter().all(|m| !m.contains("sampling/createMessage")),
        "B was asked about A's call: {b_saw:?}"
    );
    assert!(
        a_answer.message.contains("cannot tell which one"),
        "{a_answer:?}\n{err}"
    );
    let records = support::read_jsonl(&audit);
    assert!(
        records.iter().any(|r| r["kind"] == "sampling"
            && r["result"]["status"] == "denied"
            && r["result"]["error"]
                .as_str()
                .is_some_and(|why| why.contains("cannot tell"))),
        "the refusal is audited: {records:?}"
    );
}

// A routed request of a session whose client a relaying server may ask stays on the fast path
// (before, it went through rmcp's, whose typed models re-encode what they pass); a server's
// request during it goes to that session, on its own stream (its GET), as on rmcp's path, not
// to the principal's most recent session; the session's answer reaches the server.
#[test]
fn a_routed_request_of_an_agent_that_may_be_asked_stays_fast_and_its_session_is_asked() {
    let ws = Workspace::new();
    let config = relaying_faulty_config(&ws);
    let front = Front::start(&ws, &config);
    let caller = front.session(json!({"sampling": {}}));
    let most_recent = front.session(json!({"sampling": {}}));
    let mut caller_get = front.open_get(&caller);
    let _other_get = front.open_get(&most_recent);
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "prompts/get",
                      "params": {"name": "faulty__sampling"}});
    let mut conn = front.open_post(ALICE, Some(&caller), &[], &body.to_string());
    let asked: Value = serde_json::from_str(&next_messages(&mut caller_get, 1)[0]).unwrap();
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    let reply = front.post(
        Some(&caller),
        &[],
        &json!({"jsonrpc": "2.0", "id": asked["id"],
                "result": {"role": "assistant", "model": "canned",
                           "content": {"type": "text", "text": "sampled-for-the-prompt"}}}),
    );
    let mut raw = String::new();
    let read = conn.read_to_string(&mut raw);
    let answer = Answer::parse(&raw);
    let err = ws.stderr_text();
    front.stop();
    assert!(read.is_ok(), "{read:?}");
    assert_eq!(reply.status, 202, "{reply:?}");
    assert!(
        answer.fast(),
        "not answered by the fast path: {answer:?}\n{err}"
    );
    assert!(
        answer.message.contains("sampled-for-the-prompt"),
        "the server got the session's answer: {answer:?}\n{err}"
    );
    assert_eq!(served(&ws, "prompts/get"), 1, "{err}");
}

// Requests of two sessions open to one server, neither with a stream of its own: a server's
// request meanwhile could be either's, so it is refused, not sent to one of the sessions.
// Session B (which cannot be asked) has a slow call open; session A's prompt makes the server
// ask for sampling. B's call stays open until the prompt is answered (it is cancelled then),
// however long a loaded machine takes to open A's session.
#[test]
fn a_servers_request_during_requests_of_two_sessions_is_refused() {
    let ws = Workspace::new();
    let config = relaying_faulty_config(&ws);
    let front = std::sync::Arc::new(Front::start(&ws, &config));
    let b = front.session(json!({}));
    let slow = {
        let (front, b) = (front.clone(), b.clone());
        std::thread::spawn(move || front.call(&b, 7, "faulty__sleep", json!({"after": 600.0})))
    };
    let started = support::eventually(HANG_GUARD, || ws.stderr_text().contains("sleep: started"));
    let a = front.session(json!({"sampling": {}}));
    let prompt = front.post(
        Some(&a),
        &[],
        &json!({"jsonrpc": "2.0", "id": 4, "method": "prompts/get",
                "params": {"name": "faulty__sampling"}}),
    );
    let cancel = front.post_text(
        ALICE,
        Some(&b),
        &[],
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#,
    );
    let slow = slow.join().unwrap();
    let err = ws.stderr_text();
    std::sync::Arc::try_unwrap(front)
        .unwrap_or_else(|_| panic!("the front is still shared"))
        .stop();
    assert!(started, "{err}");
    assert_eq!(cancel.status, 202, "{cancel:?}");
    assert_eq!(slow.status, 200, "{slow:?}");
    assert!(
        prompt.message.contains("cannot tell which one"),
        "the server's request was not refused as unattributable: {prompt:?}\n{err}"
    );
}

// An `elicit` approver's question for a call that rmcp's path serves (the fast path leaves it a
// body with a top-level member it does not read) goes to the session whose call it is (rmcp
// puts it on that call's own stream), not to the principal's most recent session; its answer
// approves the call. (Before, it went to the most recent session, whose GET stream got it.)
#[test]
fn an_approval_question_for_a_call_on_rmcps_path_goes_to_its_own_session() {
    let ws = Workspace::new();
    let front = Front::start(&ws, &escalating_echo_config(&ws, json!({})));
    let caller = front.session(json!({"elicitation": {}}));
    let most_recent = front.session(json!({"elicitation": {}}));
    let _other_get = front.open_get(&most_recent);
    let body = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                      "params": {"name": "faulty__echo", "arguments": {"text": "mine"}},
                      "x.example/route": 1});
    asked_and_approved_on_rmcps_path(&ws, front, &caller, &[], &body, "echo: mine");
}

// A call whose `_meta` carries its client's capabilities is served outside any session (rmcp
// ignores its session header), and one of a version before 2026-07-28 has no round either:
// an `elicit` approver has no way to ask its client, so the call is denied, the reason said
// and audited, and the server never reached. The reason names what is missing; it does not
// tell an older client it speaks 2026-07-28 (as it did while any session was connected, as
// here). The control: a session's call on the same front and policy is asked, and approved.
#[test]
fn an_approval_for_a_call_with_no_session_and_no_round_is_denied_with_the_reason() {
    let ws = Workspace::new();
    let audit = ws.path().join("audit.jsonl");
    let front = Front::start(
        &ws,
        &escalating_echo_config(&ws, json!({"auditLog": audit})),
    );
    let session = front.session(json!({"elicitation": {}}));
    let echo = |id: u64, text: &str, meta: Option<Value>| {
        let mut params = json!({"name": "faulty__echo", "arguments": {"text": text}});
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    };
    // Served outside the session although it names it: its `_meta` says who its client is.
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2025-11-25",
                      "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}});
    let sessionless = front.post(
        Some(&session),
        &[("MCP-Protocol-Version", "2025-11-25")],
        &echo(7, "unasked", Some(meta)),
    );
    // The control: the session's own call is asked on its stream, and approved.
    let (asked, _, approved) =
        approved_on_its_stream(&front, &session, &[], &echo(8, "asked", None));
    let err = ws.stderr_text();
    front.stop();

    let refused: Value = serde_json::from_str(&sessionless.message)
        .unwrap_or_else(|e| panic!("{e}: {sessionless:?}\n{err}"));
    let text = refused["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(
        text.starts_with("ESCALATION REQUIRED: echo needs a yes. Denied:")
            && text.contains("reaches its client in no session and in no tool call's rounds"),
        "{text}"
    );
    assert!(!text.contains("speaks MCP 2026-07-28"), "{text}");
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert!(approved.contains("echo: asked"), "{approved}\n{err}");
    let records: Vec<Value> = support::read_jsonl(&audit)
        .into_iter()
        .filter(|r| r["toolName"] == "echo")
        .collect();
    let outcome = |text: &str| {
        records
            .iter()
            .find(|r| r["arguments"]["text"] == text)
            .map(|r| r["escalationResult"].clone())
            .unwrap_or_else(|| panic!("no record of {text}: {records:?}"))
    };
    assert_eq!(outcome("unasked"), "denied", "{records:?}");
    assert_eq!(outcome("asked"), "approved", "{records:?}");
}

// rmcp serves a call in its session when its `_meta` has the client's capabilities but no
// protocol version (`versions::served_sessionless`), so its approval question goes on the
// call's own stream like any session call's. Before, the capabilities alone made such a call
// sessionless to Palisade, which denied it as having no way to its client.
#[test]
fn an_approval_for_a_call_whose_meta_has_capabilities_but_no_version_is_asked_in_its_session() {
    let ws = Workspace::new();
    let front = Front::start(&ws, &escalating_echo_config(&ws, json!({})));
    let session = front.session(json!({"elicitation": {}}));
    let meta = json!({"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}});
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                      "params": {"name": "faulty__echo", "arguments": {"text": "in session"},
                                 "_meta": meta}});
    let version = [("MCP-Protocol-Version", "2025-11-25")];
    asked_and_approved_on_rmcps_path(&ws, front, &session, &version, &body, "echo: in session");
}

/// The faulty server behind an `elicit` approver, its `echo` escalated ("echo needs a yes"),
/// with `settings` added.
fn escalating_echo_config(ws: &Workspace, mut settings: Value) -> std::path::PathBuf {
    let policy = ws.path().join("compiled-policy.json");
    support::write_one_rule_policy(&policy, "faulty", "echo", "escalate", "echo needs a yes");
    settings["policy"] = json!(policy);
    settings["escalation"] = json!("elicit");
    settings["escalationTimeout"] = json!(30);
    faulty_config(ws, settings)
}

/// Posts the call `body` in `session` (with `headers` besides), reads the approval question off the
/// call's own stream and approves it; the question, the status of the approving POST, and the
/// call's answer.
fn approved_on_its_stream(
    front: &Front,
    session: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (Value, Answer, String) {
    use std::io::BufRead;
    let conn = front.open_post(ALICE, Some(session), headers, &body.to_string());
    conn.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut stream = std::io::BufReader::new(conn);
    let mut head = String::new();
    while stream.read_line(&mut head).unwrap() > 2 && !head.ends_with("\r\n\r\n") {}
    let asked: Value = serde_json::from_str(&next_messages(&mut stream, 1)[0]).unwrap();
    let reply = front.post(
        Some(session),
        &[],
        &json!({"jsonrpc": "2.0", "id": asked["id"],
                "result": {"action": "accept", "content": {"approve": true}}}),
    );
    let answer = next_messages(&mut stream, 1).remove(0);
    (asked, reply, answer)
}

/// Asserts that the call `body` (posted in `session` with `headers`) went through rmcp's path,
/// that its approval question came on its own stream and was approved (202), and that its
/// answer then holds `answered`; stops the front.
fn asked_and_approved_on_rmcps_path(
    ws: &Workspace,
    front: Front,
    session: &str,
    headers: &[(&str, &str)],
    body: &Value,
    answered: &str,
) {
    let (asked, reply, answer) = approved_on_its_stream(&front, session, headers, body);
    let err = ws.stderr_text();
    front.stop();
    assert_eq!(asked["method"], "elicitation/create", "{asked}\n{err}");
    assert_eq!(reply.status, 202, "{reply:?}");
    assert!(answer.contains(answered), "{answer}\n{err}");
    assert_eq!(served(ws, "tools/call"), 0, "rmcp's path served it: {err}");
}

/// The faulty server, with its prompts (`sampling` asks its client) and its sampling relayed.
fn relaying_faulty_config(ws: &Workspace) -> std::path::PathBuf {
    ws.config(
        json!({"faulty": {"command": support::python(),
                          "args": [support::repo("tests/servers/faulty_server.py")],
                          "env": {"FAULTY_ECHO_LINES": "1"},
                          "relay": {"sampling": true}}}),
        json!({}),
    )
}

/// A front whose server-everything may ask for sampling; its audit log.
fn sampling_front(ws: &Workspace) -> (Front, std::path::PathBuf) {
    let audit = ws.path().join("audit.jsonl");
    let mut servers = support::everything_servers();
    servers["everything"]["relay"] = json!({"sampling": true});
    let config = ws.config(servers, json!({"auditLog": audit}));
    (Front::start(ws, &config), audit)
}

/// Session `caller` calls (id 5) a tool whose server asks for sampling; the call's stream,
/// read up to that request, and the request.
fn sampling_asked_of(front: &Front, caller: &str) -> (std::io::BufReader<TcpStream>, Value) {
    use std::io::BufRead;
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                      "params": {"name": "everything__trigger-sampling-request",
                                 "arguments": {"prompt": "relay me", "maxTokens": 5}}});
    let conn = front.open_post(ALICE, Some(caller), &[], &body.to_string());
    let mut stream = std::io::BufReader::new(conn);
    let mut head = String::new();
    while stream.read_line(&mut head).unwrap() > 2 && !head.ends_with("\r\n\r\n") {}
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("x-accel-buffering: no"),
        "a stream tells proxies not to buffer it: {head}"
    );
    let asked: Value = serde_json::from_str(&next_messages(&mut stream, 1)[0]).unwrap();
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    assert!(asked["id"].is_string(), "{asked}");
    (stream, asked)
}

/// Whether the audit log has a relayed sampling record with `status`.
fn sampling_recorded(audit: &std::path::Path, status: &str) -> bool {
    support::relay_recorded(audit, "sampling", status)
}
