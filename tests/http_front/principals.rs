//! One principal is not another: each gets its own servers and sandbox directory, an idle
//! one's servers are stopped and come back, and the per-principal limits (in-flight cap,
//! request rate) refuse one principal's excess while another is served. The metrics endpoint
//! is checked here too, since it counts these calls.

use std::time::Duration;

use serde_json::{json, Value};

use crate::fixtures::{faulty_config, fs_config, sleep_call, tokens_file, ALICE, BOB};
use crate::front::{post, wait_log, Front};
use crate::support::{self, Workspace};

// Two principals through real HTTP clients: each gets its own sandboxed fs-server and its
// own session sandbox directory; one writes there, the other cannot read it; every record
// names its principal.
#[test]
fn principals_get_their_own_servers_and_sandbox_dirs() {
    let ws = Workspace::new();
    let (config, sandbox, audit) = fs_config(&ws);
    let tokens = tokens_file(&ws);
    let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let alice_dir = sandbox.join("principals/alice");
    let secret = alice_dir.join("diary.txt");
    let a = front.client(
        ALICE,
        json!([{"tool": "fs__write", "args": {"path": secret, "content": "alice only"}},
               {"tool": "fs__read", "args": {"path": secret}}]),
    );
    let b = front.client(BOB, json!([{"tool": "fs__read", "args": {"path": secret}}]));
    let (unauth_metrics, _) = front.raw("GET", "/metrics", &[]);
    let bearer = format!("Bearer {ALICE}");
    let (m_status, metrics) = front.raw("GET", "/metrics", &[("Authorization", &bearer)]);
    let status = front.stop();
    assert_eq!(unauth_metrics, 401, "metrics are not for everyone");
    assert_eq!(m_status, 200, "{metrics}");
    for want in [
        "palisade_calls_total{server=\"fs\",tool=\"write\",decision=\"allow\",result=\"success\"} 1",
        "palisade_calls_total{server=\"fs\",tool=\"read\",decision=\"deny\",result=\"denied\"} 1",
        "palisade_principals_active 2",
        "palisade_servers{state=\"running\"} 2",
        "palisade_http_refusals_total{reason=\"unauthorized\"} 1",
        "palisade_call_duration_seconds_count 3",
    ] {
        assert!(metrics.contains(want), "{want} not in\n{metrics}");
    }
    let err = ws.stderr_text();
    assert!(a.get("error").is_none(), "{a}\n{err}");
    assert!(
        a["tools"].as_array().unwrap().contains(&json!("fs__read")),
        "{a}"
    );
    assert_eq!(a["calls"][1]["text"], "alice only", "{a}");
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "alice only",
        "written on the host"
    );
    assert!(
        b["calls"][0]["is_error"] == true || b["calls"][0]["ok"] == false,
        "bob read alice's file: {b}"
    );
    assert!(
        !b["calls"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("alice only"),
        "{b}"
    );
    assert!(sandbox.join("principals/bob").is_dir());
    let records = support::read_jsonl(&audit);
    let by = |p: &str| records.iter().filter(|r| r["principal"] == p).count();
    assert_eq!((by("alice"), by("bob")), (2, 1), "{records:?}");
    assert!(status.success(), "{status}\n{err}");
    assert!(
        !err.contains(ALICE) && !err.contains(BOB),
        "a token was logged:\n{err}"
    );
}

// A principal idle for longer than --idle-timeout has its servers stopped; its next request
// starts them again. (3 s: only a POST's end marks the principal used, and the Python client
// can leave more than a second between two of its POSTs on a loaded machine.)
#[test]
fn an_idle_principals_servers_are_stopped_and_come_back_on_use() {
    let ws = Workspace::new();
    let (config, _, _) = fs_config(&ws);
    let tokens = tokens_file(&ws);
    let front = Front::start(
        &ws,
        &config,
        &["--tokens", tokens.to_str().unwrap(), "--idle-timeout", "3"],
    );
    let first = front.client(ALICE, json!([]));
    let mut reaped = false;
    for _ in 0..300 {
        if ws.stderr_text().contains("idle: stopping its servers") {
            reaped = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let again = front.client(ALICE, json!([{"tool": "fs__list_roots", "args": {}}]));
    front.stop();
    let err = ws.stderr_text();
    assert!(first.get("error").is_none(), "{first}");
    assert!(reaped, "not reaped:\n{err}");
    assert_eq!(again["calls"][0]["ok"], true, "{again}\n{err}");
    assert_eq!(
        err.matches("servers started for a new principal").count(),
        2,
        "{err}"
    );
}

// One principal floods (maxRequestsPerPrincipal 2: two slow calls hold its slots, five more
// follow): the five get 429 with Retry-After and a JSON-RPC error carrying their id, each is
// audited under its principal, and none reaches the server; meanwhile another principal's
// calls go through. A notification over the cap still passes (it answers nothing).
// Fails without the cap: the five are accepted and wait in line behind the slow calls.
#[test]
fn one_principals_flood_is_refused_while_another_principal_is_served() {
    let ws = Workspace::new();
    let (config, audit, _) = faulty_config(
        &ws,
        json!({"maxRequestsPerPrincipal": 2, "shutdownGrace": 1}),
    );
    let tokens = tokens_file(&ws);
    let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let session = front.session(ALICE);
    let slow: Vec<_> = (1..=2)
        .map(|id| {
            let (addr, session) = (front.addr, session.clone());
            std::thread::spawn(move || post(addr, ALICE, Some(&session), &sleep_call(id, 15.0)))
        })
        .collect();
    let both_started = wait_log(&ws, "sleep: started", 2);
    let flood: Vec<(u16, String)> = (10..15)
        .map(|id| front.post(ALICE, Some(&session), &sleep_call(id, 0.0)))
        .collect();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": 99}});
    let (note_status, note_text) = front.post(ALICE, Some(&session), &note);
    let bob = front.client(
        BOB,
        json!([{"tool": "faulty__echo", "args": {"text": "hi"}}]),
    );
    let bearer = format!("Bearer {ALICE}");
    let (_, metrics) = front.raw("GET", "/metrics", &[("Authorization", &bearer)]);
    let started_before_stop = ws.stderr_text().matches("sleep: started").count();
    front.stop();
    for t in slow {
        let _ = t.join();
    }
    let err = ws.stderr_text();
    assert!(both_started, "the slow calls did not start:\n{err}");
    for (i, (status, text)) in flood.iter().enumerate() {
        assert_eq!(*status, 429, "flood call {i}: {text}");
        let lower = text.to_ascii_lowercase();
        assert!(lower.contains("retry-after: 1"), "{text}");
        let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["id"], json!(10 + i), "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("maxRequestsPerPrincipal 2"),
            "{body}"
        );
    }
    assert_eq!(
        note_status, 202,
        "a notification is never refused: {note_text}"
    );
    assert_eq!(bob["calls"][0]["ok"], true, "{bob}\n{err}");
    assert_eq!(bob["calls"][0]["text"], "echo: hi", "{bob}");
    assert_eq!(
        started_before_stop, 2,
        "a refused call reached the server:\n{err}"
    );
    assert!(
        metrics.contains("palisade_http_refusals_total{reason=\"principal_busy\"} 5"),
        "{metrics}"
    );
    let records = support::read_jsonl(&audit);
    let refused: Vec<&Value> = records
        .iter()
        .filter(|r| r["policyDecision"]["rule"] == "http-request-cap")
        .collect();
    assert_eq!(refused.len(), 5, "{records:?}");
    for r in &refused {
        assert_eq!(r["principal"], "alice", "{r}");
        assert_eq!(
            (&r["serverName"], &r["toolName"]),
            (&json!("faulty"), &json!("sleep"))
        );
    }
    assert!(
        records
            .iter()
            .any(|r| r["principal"] == "bob" && r["toolName"] == "echo"),
        "{records:?}"
    );
}

// requestsPerMinute 1 with a burst of 3: Alice's initialize and two calls use the burst, her
// next two calls get 429 with a Retry-After of the refill time and are audited; Bob's bucket
// is his own and his calls go through. Fails without the rate limit (all answered 200).
#[test]
fn a_principal_over_its_request_rate_is_refused_and_another_is_not() {
    let ws = Workspace::new();
    let (config, audit, _) = faulty_config(&ws, json!({"requestsPerMinute": 1, "requestBurst": 3}));
    let tokens = tokens_file(&ws);
    let front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let echo = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "faulty__echo", "arguments": {"text": "hi"}}})
    };
    let session = front.session(ALICE);
    let alice: Vec<(u16, String)> = (1..=4)
        .map(|id| front.post(ALICE, Some(&session), &echo(id)))
        .collect();
    let bob_session = front.session(BOB);
    let (bob, bob_text) = front.post(BOB, Some(&bob_session), &echo(1));
    front.stop();
    let err = ws.stderr_text();
    let statuses: Vec<u16> = alice.iter().map(|(s, _)| *s).collect();
    assert_eq!(statuses, [200, 200, 429, 429], "{alice:?}\n{err}");
    for (_, text) in &alice[..2] {
        assert!(text.contains("echo: hi"), "{text}");
    }
    for (_, text) in &alice[2..] {
        let retry: u64 = text
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("retry-after:")
                    .map(|v| v.trim().to_string())
            })
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!((1..=60).contains(&retry), "{text}");
        assert!(text.contains("requestsPerMinute 1"), "{text}");
    }
    assert_eq!(bob, 200, "{bob_text}");
    assert!(bob_text.contains("echo: hi"), "{bob_text}");
    let records = support::read_jsonl(&audit);
    let refused: Vec<&Value> = records
        .iter()
        .filter(|r| r["policyDecision"]["rule"] == "http-request-cap")
        .collect();
    assert_eq!(refused.len(), 2, "{records:?}");
    assert!(refused
        .iter()
        .all(|r| r["principal"] == "alice" && r["toolName"] == "echo"));
}
