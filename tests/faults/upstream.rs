//! Upstream faults: an agent that does not read while a server floods notifications;
//! malformed lines, unknown methods and a huge message from the client; a thousand
//! concurrent calls; a client that disconnects mid-call.

use std::time::Duration;

use serde_json::{json, Value};

use crate::gw::*;
use crate::*;

/// A server floods log notifications while the agent does not read: serve cannot relay them
/// (its stdout is full), and must not queue them without bound. Regression: before the relay
/// budget (`UpstreamLink::for_relay`) serve's RSS reached 775 MB here.
#[test]
fn a_notification_flood_to_an_agent_that_does_not_read_stays_bounded() {
    let mut gw = Gw::start(Value::Null, json!({}));
    gw.paused.store(true, std::sync::atomic::Ordering::SeqCst);
    let id = gw.send_call("faulty__notify_flood", json!({"count": 400000}));
    let mut peak = 0;
    for _ in 0..80 {
        std::thread::sleep(Duration::from_millis(100));
        peak = peak.max(gw.rss_kb().1);
    }
    gw.paused.store(false, std::sync::atomic::Ordering::SeqCst);
    println!("agent not reading: serve VmHWM {peak} kB");
    assert!(
        peak < RSS_BOUND_KB,
        "serve's peak RSS {peak} kB while the agent stalled"
    );
    let (ok, text) = outcome(&gw.response(&id));
    assert_eq!((ok, text.as_str()), (true, "notified 400000"));
    gw.still_healthy("flood to a stalled agent");
    assert!(
        gw.stderr_text()
            .contains("notification(s) from servers dropped"),
        "the drops are logged"
    );
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

#[test]
fn malformed_lines_and_unknown_methods_from_the_client_do_not_stop_the_session() {
    let mut gw = Gw::start(Value::Null, json!({}));
    gw.send_line(b"{\"jsonrpc\": \"2.0\", \"id\": ");
    gw.send_line(b"not json at all");
    gw.send_line(b"\xff\xfe\xfd");
    gw.send_line(b"[1, 2, 3]");
    let id = gw.request("no/such/method", json!({}));
    let r = gw.response(&id);
    assert_eq!(r["error"]["code"], -32601, "unknown method: {r}");
    let id = gw.request("ping", json!({}));
    assert!(gw.response(&id).get("result").is_some());
    gw.still_healthy("malformed client input");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

/// A client message over the 16 MiB line limit is not read into memory: serve answers the
/// request (its id is read from the line's first bytes) with an error, and goes on.
#[test]
fn a_huge_client_message_gets_an_error_and_the_session_goes_on() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let mut huge = br#"{"jsonrpc":"2.0","id":"huge","method":"tools/call","params":{"name":"faulty__echo","arguments":{"text":""#.to_vec();
    huge.extend(std::iter::repeat_n(b'h', 40 * 1024 * 1024));
    huge.extend(br#""}}}"#);
    gw.send_line(&huge);
    drop(huge);
    let r = gw.response("huge");
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let text = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        text.contains("over the 16777216-byte limit of one message"),
        "{text}"
    );
    gw.still_healthy("40 MB client message");
    assert_eq!(gw.finish(), Some(0));
    // It never reached the pipeline: no audit record (`audit_complete` counts exactly).
    gw.audit_complete();
}

#[test]
fn a_thousand_concurrent_calls_are_all_answered_and_audited() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let mut ids = Vec::new();
    for i in 0..1000 {
        let (tool, args) = if i % 2 == 0 {
            ("faulty__echo", json!({"text": i.to_string()}))
        } else {
            ("fs__list_roots", json!({}))
        };
        ids.push((i, gw.send_call(tool, args)));
    }
    for (i, id) in ids {
        let (ok, text) = outcome(&gw.response(&id));
        assert!(ok, "call {i}: {text}");
        if i % 2 == 0 {
            assert_eq!(text, format!("echo: {i}"));
        }
    }
    gw.still_healthy("1000 concurrent calls");
    assert_eq!(gw.finish(), Some(0));
    let records = gw.audit_complete();
    assert!(records.len() >= 1000);
}

#[test]
fn a_client_that_disconnects_mid_call_gets_its_call_audited_and_every_child_reaped() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, _) = gw.call("faulty__echo", json!({"text": "before"}));
    assert!(ok);
    let children = descendants(gw.pid());
    assert!(children.len() >= 2, "saw the servers: {children:?}");
    let hung = gw.send_call("faulty__hang", json!({}));
    // Let the call reach the server, then go away: stdin closed, stdout unread.
    std::thread::sleep(Duration::from_millis(500));
    let code = gw.finish();
    assert_eq!(code, Some(0), "serve exits cleanly\n{}", gw.stderr_text());
    let left: Vec<String> = children
        .iter()
        .filter(|p| alive(**p))
        .map(|p| {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            format!(
                "{p}: {} [{stat}]",
                String::from_utf8_lossy(&cmd).replace('\0', " ")
            )
        })
        .collect();
    assert!(left.is_empty(), "every child reaped: {left:?}");
    let records = gw.audit_complete();
    let rec = records
        .iter()
        .find(|r| id_key(&r["requestId"]) == hung)
        .expect("the in-flight call has its record");
    assert_eq!(rec["result"]["status"], "error", "{rec}");
    assert!(
        rec["result"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("cancelled"),
        "{rec}"
    );
}
