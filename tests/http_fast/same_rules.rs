//! What holds on the fast path as on rmcp's: policy, the kernel's refusals, the audit's
//! principal, sessions, cancellation, a real SDK client; and what it leaves to rmcp.

use super::client::*;
use super::*;
use std::io::{Read, Write};
use std::net::TcpStream;

// Policy, the kernel's refusal and the audit's principal hold on the fast path.
#[test]
fn fast_calls_keep_policy_sandbox_blocked_and_the_principal() {
    let ws = Workspace::new();
    let policy = ws.path().join("compiled-policy.json");
    support::write_one_rule_policy(&policy, "fs", "list", "deny", "listing is not for you");
    let (config, audit) = fs_config(&ws, json!({"policy": policy, "sandboxPolicy": "enforce"}));
    // A write-protected directory inside alice's writable sandbox dir (it must exist at launch).
    let home = ws.canonical().join("sandbox/principals/alice");
    std::fs::create_dir_all(home.join(".git/hooks")).unwrap();
    let front = Front::start(&ws, &config);
    let session = front.session(json!({}));
    let ok = front.call(
        &session,
        1,
        "fs__write",
        json!({"path": home.join("note.txt"), "content": "hi"}),
    );
    let denied = front.call(&session, 2, "fs__list", json!({"path": ws.canonical()}));
    let blocked = front.call(
        &session,
        3,
        "fs__write",
        json!({"path": home.join(".git/hooks/pre-commit"), "content": "evil"}),
    );
    front.stop();
    for a in [&ok, &denied, &blocked] {
        assert!(a.fast(), "not the fast path: {a:?}");
    }
    assert!(ok.json()["result"]["isError"] != json!(true), "{ok:?}");
    assert_eq!(
        std::fs::read_to_string(home.join("note.txt")).unwrap(),
        "hi"
    );
    let denied_text = denied.json().to_string();
    assert!(denied_text.contains("listing is not for you"), "{denied:?}");
    let blocked_text = blocked.json().to_string();
    assert!(blocked_text.contains("[SANDBOX BLOCKED]"), "{blocked:?}");
    assert!(!home.join(".git/hooks/pre-commit").exists());
    let records = support::read_jsonl(&audit);
    assert_eq!(records.len(), 3, "{records:?}");
    for r in &records {
        assert_eq!(r["principal"], "alice", "{r}");
    }
    assert_eq!(
        records[1]["policyDecision"]["rule"], "deny-list",
        "{}",
        records[1]
    );
}

// An unknown or ended session gets rmcp's own 404, and so does one principal presenting
// another's session.
#[test]
fn unknown_and_deleted_sessions_get_404() {
    let ws = Workspace::new();
    let (config, audit) = fs_config(&ws, json!({}));
    let front = Front::start(&ws, &config);
    let bogus = front.call("not-a-session", 1, "fs__stat", json!({"path": "/"}));
    let session = front.session(json!({}));
    let live = front.call(&session, 2, "fs__stat", json!({"path": ws.canonical()}));
    // End the session (DELETE), then call on it.
    let mut s = TcpStream::connect(front.addr).unwrap();
    write!(
        s,
        "DELETE /mcp HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: Bearer {ALICE}\r\n\
         Mcp-Session-Id: {session}\r\n\r\n",
        front.addr
    )
    .unwrap();
    let mut deleted = String::new();
    let _ = s.read_to_string(&mut deleted);
    let after = front.call(&session, 3, "fs__stat", json!({"path": "/"}));
    // Another principal presenting alice's live session: his own session manager does not
    // know it (rmcp's 404), and nothing reaches alice's servers.
    let other = front.session(json!({}));
    let bobs = front.post_as(
        BOB,
        Some(&other),
        &[],
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                "params": {"name": "fs__stat", "arguments": {"path": "/"}}}),
    );
    front.stop();
    assert_eq!(bobs.status, 404, "{bobs:?}");
    assert_eq!(bogus.status, 404, "{bogus:?}");
    assert!(live.fast(), "{live:?}");
    assert!(deleted.starts_with("HTTP/1.1 2"), "{deleted}");
    assert_eq!(after.status, 404, "{after:?}");
    // Only the live call reached a server.
    assert_eq!(support::read_jsonl(&audit).len(), 1);
}

// A call whose agent a server may ask something (its elicitation relay is on and the agent
// declared elicitation) is answered on a stream of its own, which the server's request would go
// on; before, it went through rmcp's path, as did every call of the principal once such an
// agent was its linked one. A call that nothing can ask about is answered whole. (A progress
// token is the fast path's too:
// `as_written::progress_reaches_an_http_agent_as_the_server_wrote_it`.)
#[test]
fn calls_that_may_ask_the_agent_get_a_stream_of_their_own() {
    let ws = Workspace::new();
    let dir = ws.canonical();
    let config = ws.config(
        json!({"fs": {"command": palisade(), "args": ["fs-server"],
                      "relay": {"elicitation": true}}}),
        json!({}),
    );
    let front = Front::start(&ws, &config);
    let plain = front.session(json!({}));
    let control = front.call(&plain, 9, "fs__stat", json!({"path": dir}));
    let asking = front.session(json!({"elicitation": {}}));
    let elicit = front.call(&asking, 2, "fs__stat", json!({"path": dir}));
    let plain_after = front.call(&plain, 3, "fs__stat", json!({"path": dir}));
    front.stop();
    for a in [&control, &elicit, &plain_after] {
        assert_eq!(a.status, 200, "{a:?}");
        assert!(a.json()["result"]["content"].is_array(), "{a:?}");
    }
    // Whole answers, of known length, where no one can be asked; a stream where the agent can.
    assert!(control.fast(), "{control:?}");
    assert!(plain_after.fast(), "{plain_after:?}");
    assert!(Answer::is(&elicit.head, "text/event-stream"), "{elicit:?}");
    assert!(elicit.header("content-length").is_none(), "{elicit:?}");
    assert_eq!(served(&ws, "tools/call"), 3, "{}", ws.stderr_text());
}

// The Python `mcp` SDK's Streamable HTTP client works against the fast path's JSON answers.
#[test]
fn the_python_sdk_client_calls_through_the_fast_path() {
    let ws = Workspace::new();
    let (config, audit) = fs_config(&ws, json!({}));
    let front = Front::start(&ws, &config);
    let home = ws.canonical().join("sandbox/principals/alice");
    let note = home.join("sdk.txt");
    let report = sdk_report(
        &front,
        json!([{"tool": "fs__write", "args": {"path": note, "content": "from the sdk"}},
               {"tool": "fs__read", "args": {"path": note}}]),
    );
    front.stop();
    assert!(report.get("error").is_none(), "{report}");
    assert_eq!(report["calls"][1]["text"], "from the sdk", "{report}");
    let records = support::read_jsonl(&audit);
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(
        records.iter().all(|r| r["principal"] == "alice"),
        "{records:?}"
    );
    // The SDK's calls were served by the fast path: the log says how many.
    assert_eq!(served(&ws, "tools/call"), 2, "{}", ws.stderr_text());
}

// The SDK's client asking for progress gets it on the fast path: each notification on the
// POST's own stream reaches its progress callback, then the result.
#[test]
fn the_python_sdk_client_gets_progress_through_the_fast_path() {
    let ws = Workspace::new();
    let front = Front::start(&ws, &everything_config(&ws));
    let report = sdk_report(
        &front,
        json!([{"tool": "everything__trigger-long-running-operation",
                "args": {"duration": 0.2, "steps": 2}, "progress": true}]),
    );
    front.stop();
    assert!(report.get("error").is_none(), "{report}");
    let call = &report["calls"][0];
    assert_eq!(call["ok"], true, "{report}");
    // (The SDK reads progress as floats.)
    assert_eq!(
        call["progress"],
        json!([[1.0, 2.0], [2.0, 2.0]]),
        "{report}"
    );
    assert_eq!(served(&ws, "tools/call"), 1, "{}", ws.stderr_text());
}

// `notifications/cancelled` naming a fast call cancels it: the call ends at once (its response
// with no answer, as JSON-RPC asks) instead of sleeping on, and its audit record is written.
// (Without the fast path's own cancellation, rmcp's session knows no such request and the call
// sleeps for 600 s.)
#[test]
fn a_fast_call_is_cancelled_by_notifications_cancelled() {
    fast_call_cancelled_by(
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"changed my mind"}}"#,
    );
}

// The same method written with JSON escapes is the same method to rmcp, so it cancels the fast
// call too (before, the fast path read only the method as written and left this body to rmcp,
// whose session does not know the call: it slept on).
#[test]
fn a_cancellation_written_with_escapes_cancels_the_fast_call() {
    fast_call_cancelled_by(
        r#"{"jsonrpc":"2.0","method":"notifications\/cancelled","params":{"requestId":7}}"#,
    );
}

/// Starts a fast call (id 7) that sleeps 600 s, posts `cancel` as written, and asserts the call
/// ended unanswered with its audit record written.
fn fast_call_cancelled_by(cancel: &str) {
    let ws = Workspace::new();
    let audit = ws.path().join("audit.jsonl");
    let config = faulty_config(&ws, json!({"auditLog": audit}));
    let front = std::sync::Arc::new(Front::start(&ws, &config));
    let session = front.session(json!({}));
    let call = {
        let (front, session) = (front.clone(), session.clone());
        std::thread::spawn(move || {
            front.call(&session, 7, "faulty__sleep", json!({"after": 600.0}))
        })
    };
    let started = support::eventually(HANG_GUARD, || ws.stderr_text().contains("sleep: started"));
    let cancel = front.post_text(ALICE, Some(&session), &[], cancel);
    let answer = call.join().unwrap();
    let err = ws.stderr_text();
    std::sync::Arc::try_unwrap(front)
        .unwrap_or_else(|_| panic!("the front is still shared"))
        .stop();
    assert!(started, "{err}");
    assert_eq!(cancel.status, 202, "{cancel:?}");
    assert!(answer.fast(), "{answer:?}\n{err}");
    // As rmcp's path does, the cancelled request's response ends with no answer.
    assert_eq!(answer.message, "", "{answer:?}");
    let records = support::read_jsonl(&audit);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["principal"], "alice", "{records:?}");
}

// A call answered on its own stream (it asked for progress) holds its slot under the
// principal's request cap while it runs (another request is refused with 429; the slot
// given back when the POST was answered let it through, tried), and is cancelled when the
// client goes away: its audit record is written at once instead of after the server's 600 s.
#[test]
fn a_streamed_fast_call_ends_when_the_client_goes_away() {
    let ws = Workspace::new();
    let (front, audit, session) = one_request_at_a_time(&ws);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "faulty__sleep", "arguments": {"after": 600.0},
                                 "_meta": {"progressToken": "p7"}}});
    let conn = front.open_post(ALICE, Some(&session), &[], &body.to_string());
    let started = support::eventually(HANG_GUARD, || ws.stderr_text().contains("sleep: started"));
    let over_cap = front.call(&session, 8, "faulty__echo", json!({"text": "over the cap"}));
    drop(conn);
    let slept = || {
        audit.exists()
            && support::read_jsonl(&audit)
                .iter()
                .any(|r| r["toolName"] == "sleep")
    };
    let recorded = support::eventually(HANG_GUARD, slept);
    let err = ws.stderr_text();
    front.stop();
    assert!(started, "{err}");
    assert!(
        recorded,
        "no audit record 30 s after the client went away:\n{err}"
    );
    assert_eq!(over_cap.status, 429, "{over_cap:?}");
    assert_eq!(served(&ws, "tools/call"), 1, "{err}");
}

// A plain call's answer holds its slot under the principal's request cap until the
// connection has taken it, as on rmcp's path: a client that does not read its answers cannot
// pile them up past its cap. The answer here (15 MiB) is more than the socket buffers hold,
// so it waits unwritten; another call meanwhile gets 429 (before, the slot was given back
// when the call ended and it got through, tried), and one after the client went away is
// served.
#[test]
fn an_unread_answer_holds_its_slot() {
    let ws = Workspace::new();
    let (front, audit, session) = one_request_at_a_time(&ws);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "faulty__huge_line", "arguments": {"mb": 15}}});
    let conn = front.open_post(ALICE, Some(&session), &[], &body.to_string());
    let answered = || {
        audit.exists()
            && support::read_jsonl(&audit)
                .iter()
                .any(|r| r["toolName"] == "huge_line")
    };
    let ended = support::eventually(HANG_GUARD, answered);
    let while_unread = front.call(&session, 8, "faulty__echo", json!({"text": "unread"}));
    drop(conn);
    let after = || {
        front
            .call(&session, 9, "faulty__echo", json!({"text": "read"}))
            .status
            == 200
    };
    let served_after = support::eventually(HANG_GUARD, after);
    let err = ws.stderr_text();
    front.stop();
    assert!(ended, "the big call never ended:\n{err}");
    assert_eq!(while_unread.status, 429, "{while_unread:?}");
    assert!(served_after, "the slot was not given back:\n{err}");
}

// An agent that asks for progress and does not read its POST's stream does not hold the
// server: past what the socket and the stream's backlog hold, the notifications are
// dropped, the server's output keeps being read, and another call to it is answered. The
// flooded call's stream still ends with its answer. (Waiting for room instead stalls the
// server's reader: the other call then gets no answer.)
#[test]
fn an_agent_not_reading_its_progress_does_not_hold_the_server() {
    let ws = Workspace::new();
    let config = faulty_config(&ws, json!({}));
    let front = Front::start(&ws, &config);
    let session = front.session(json!({}));
    let count = 20_000;
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "faulty__progress_flood", "arguments": {"count": count},
                                 "_meta": {"progressToken": "f1"}}});
    let mut flood = front.open_post(ALICE, Some(&session), &[], &body.to_string());
    // The flood's stream unread meanwhile.
    let echo = front.call(&session, 9, "faulty__echo", json!({"text": "still here"}));
    let mut raw = Vec::new();
    let _ = flood.read_to_end(&mut raw);
    let flooded = Answer::parse(&String::from_utf8_lossy(&raw));
    front.stop();
    assert_eq!(echo.status, 200, "{echo:?}\n{}", ws.stderr_text());
    assert_eq!(
        echo.json()["result"]["content"][0]["text"],
        "echo: still here",
        "{echo:?}"
    );
    assert_eq!(
        flooded.json()["result"]["content"][0]["text"],
        format!("progress sent: {count}"),
        "{}",
        flooded.message
    );
    let got = flooded.notes_of("notifications/progress").len();
    assert!(
        got > 0 && got < count,
        "{got} of {count} progress notifications"
    );
}

/// The faulty server behind a front that lets a principal one request in flight, with an
/// audit file: the front, the audit file's path and an initialized session.
fn one_request_at_a_time(ws: &Workspace) -> (Front, PathBuf, String) {
    let audit = ws.path().join("audit.jsonl");
    let config = faulty_config(
        ws,
        json!({"auditLog": audit, "http": {"maxRequestsPerPrincipal": 1}}),
    );
    let front = Front::start(ws, &config);
    let session = front.session(json!({}));
    (front, audit, session)
}
