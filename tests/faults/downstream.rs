//! Downstream faults: a server that crashes mid-call, hangs, writes garbage, unsolicited
//! notifications, a stderr flood, a 100 MB line, a sampling request, a roots/list flood,
//! output over the rate limit, and the memory and CPU limits killing it mid-call.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::gw::*;
use crate::*;

#[test]
fn a_server_that_crashes_mid_call_fails_that_call_with_its_exit_and_comes_back() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, text) = gw.call("faulty__crash", json!({"after": 0.3}));
    assert!(!ok, "the crashed call is an error: {text}");
    assert!(
        text.contains("server `faulty` exited or closed its connection before answering")
            && text.contains("exit status: 3"),
        "the agent is told how it ended: {text}"
    );
    gw.still_healthy("crash");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

#[test]
fn a_hung_call_ends_at_the_call_timeout_and_the_server_keeps_serving() {
    let mut gw = Gw::start(Value::Null, json!({"callTimeout": 3}));
    let (ok, text) = gw.call("faulty__hang", json!({}));
    assert!(!ok);
    assert!(
        text.contains("server `faulty` did not answer within 3s"),
        "{text}"
    );
    gw.still_healthy("hang");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

#[test]
fn stdout_garbage_invalid_json_and_unknown_ids_are_ignored() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, text) = gw.call("faulty__garbage", json!({"mb": 20}));
    assert!(ok, "garbage: {text}");
    assert!(text.starts_with("garbage: "), "{text}");
    gw.still_healthy("garbage");
    let (ok, text) = gw.call("faulty__invalid_json", json!({"count": 3000}));
    assert_eq!((ok, text.as_str()), (true, "invalid lines: 3000"));
    gw.still_healthy("invalid json");
    let (ok, text) = gw.call("faulty__unknown_ids", json!({"count": 2000}));
    assert_eq!((ok, text.as_str()), (true, "unknown ids: 4000"));
    gw.still_healthy("unknown ids");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

#[test]
fn unsolicited_notifications_do_not_reach_the_agent_as_anything_but_logs() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, text) = gw.call("faulty__notify_flood", json!({"count": 20000}));
    assert_eq!((ok, text.as_str()), (true, "notified 20000"));
    gw.still_healthy("notification flood");
    assert_eq!(gw.finish(), Some(0));
    // Progress for a token nobody registered is dropped; log messages are relayed.
    let progress = gw
        .from_gateway
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .count();
    assert_eq!(progress, 0, "progress for unknown tokens is not relayed");
    gw.audit_complete();
}

#[test]
fn a_stderr_flood_is_drained_with_bounded_memory() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, text) = gw.call("faulty__stderr_flood", json!({"mb": 40, "newlines": true}));
    assert_eq!((ok, text.as_str()), (true, "stderr: 41943040 bytes"));
    gw.still_healthy("stderr flood (lines)");
    let (ok, text) = gw.call("faulty__stderr_flood", json!({"mb": 40, "newlines": false}));
    assert_eq!((ok, text.as_str()), (true, "stderr: 41943040 bytes"));
    gw.still_healthy("stderr flood (one 40 MB line)");
    let log = gw.stderr_text();
    assert!(log.contains("the rest is discarded"), "the log is capped");
    assert!(
        log.len() < 4 * 1024 * 1024,
        "serve's own log stays small: {}",
        log.len()
    );
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

#[test]
fn a_100_mb_line_is_a_protocol_fault_the_server_is_restarted_and_memory_stays_bounded() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, text) = gw.call("faulty__huge_line", json!({"mb": 100}));
    assert!(!ok, "{text}");
    assert!(
        text.contains("server `faulty` exited or closed its connection before answering")
            && text.contains("16777216-byte limit")
            && text.contains("protocol fault"),
        "the call names the fault: {text}"
    );
    gw.still_healthy("100 MB line");
    let log = gw.stderr_text();
    assert!(log.contains("protocol fault"), "the log says it too");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

#[test]
fn a_sampling_request_is_refused_and_never_reaches_the_agent() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, text) = gw.call("faulty__sampling", json!({}));
    assert!(ok, "{text}");
    assert!(
        text.starts_with("error: "),
        "the server's sampling request got an error: {text}"
    );
    gw.still_healthy("sampling");
    assert_eq!(gw.finish(), Some(0));
    let asked: Vec<&Value> = gw
        .from_gateway
        .iter()
        .filter(|m| m.get("id").is_some())
        .collect();
    assert!(asked.is_empty(), "no request reached the agent: {asked:?}");
    let records = gw.audit_complete();
    let refused: Vec<&Value> = records.iter().filter(|r| r["kind"] == "sampling").collect();
    assert!(
        refused.len() == 1 && refused[0]["result"]["status"] == "denied",
        "the refused sampling request is audited as denied: {refused:?}"
    );
}

#[test]
fn a_roots_list_flood_is_answered_and_bounded() {
    let mut gw = Gw::start(Value::Null, json!({}));
    let (ok, text) = gw.call("faulty__roots_flood", json!({"count": 5000}));
    assert!(ok, "{text}");
    assert_eq!(text, "roots answers: 5000/5000");
    gw.still_healthy("roots/list flood");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

#[test]
fn output_over_the_rate_limit_kills_and_restarts_the_server_and_says_why() {
    // 1 MiB/s (bursts of 8 MiB): the flood passes it within a second or so.
    let mut gw = Gw::start(json!({"outputBytesPerSecond": 1048576}), json!({}));
    let (ok, text) = gw.call("faulty__rate_flood", json!({}));
    assert!(!ok, "{text}");
    assert!(
        text.contains("output-rate limit (1048576 bytes/s")
            && text.contains("sandbox.limits.outputBytesPerSecond"),
        "the call names the limit: {text}"
    );
    gw.still_healthy("output-rate limit");
    assert!(
        gw.stderr_text().contains("output-rate limit"),
        "the log says it"
    );
    // Ordinary traffic stays under the same limit.
    for i in 0..50 {
        let (ok, text) = gw.call("faulty__echo", json!({"text": i.to_string()}));
        assert!(ok, "{text}");
    }
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

/// A server floods `roots/list` requests and stops reading its stdin: the answers cannot be
/// written and must not pile up in the gateway (regression: 1 GB before `stdin_watch.rs`).
/// Its requests are held while its stdin is full; still stalled after the stall limit (the
/// call timeout, 5 s here), it is a protocol fault: killed, restarted, the call told why.
#[test]
fn a_roots_list_flood_from_a_server_that_does_not_read_stays_bounded() {
    let mut gw = Gw::start(Value::Null, json!({"callTimeout": 5}));
    let id = gw.send_call(
        "faulty__roots_flood_deaf",
        json!({"count": 300000, "after": 30}),
    );
    let mut peak = 0;
    let answer = loop {
        if let Ok(v) = gw.rx.recv_timeout(Duration::from_millis(100)) {
            gw.take(v);
        }
        peak = peak.max(gw.rss_kb().1);
        if let Some(v) = gw.responses.remove(&id) {
            break v;
        }
    };
    let (ok, text) = outcome(&answer);
    println!("deaf roots flood: serve VmHWM {peak} kB; call: {text}");
    assert!(peak < RSS_BOUND_KB, "serve's peak RSS {peak} kB");
    // The call timeout and the stall limit are the same 5 s: either ends the call first.
    assert!(!ok, "{text}");
    assert!(
        text.contains("kept sending requests without reading its stdin for 5s")
            || text.contains("did not answer within 5s"),
        "{text}"
    );
    // When the call timed out first, the stall fault may still be coming (its clock starts
    // when the pipe fills): until it kills the server, the stalled process is still listed
    // and the health check's call would go to it.
    assert!(
        gw.wait_stderr("kept sending requests without reading its stdin for 5s (protocol fault)"),
        "the stall was a fault: the server was killed and restarted\n{}",
        gw.stderr_text()
    );
    gw.still_healthy("roots/list flood, server not reading");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

/// The existing `sandbox.limits.memoryMb`: a server killed by it is restarted like a crash,
/// and the call it was running is told which limit killed it. Control: the same allocation
/// succeeds without the limit.
#[test]
fn a_memory_limit_kill_tells_the_in_flight_call_why() {
    // Without a cgroup the memory limit is RLIMIT_DATA: allocations fail, nothing is killed
    // (tests/limits.rs covers that).
    let out = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["check", "--json"])
        .output()
        .expect("run palisade check");
    let report: Value = serde_json::from_slice(&out.stdout).expect("check --json");
    if report["resource_limits"]["memory"] != true {
        skip::host_skip(
            "faults::a_memory_limit_kill_tells_the_in_flight_call_why",
            "palisade check: servers get no cgroup on this machine",
        );
        return;
    }
    let mut control = Gw::start(Value::Null, json!({}));
    let (ok, text) = control.call("faulty__hog", json!({"mb": 300}));
    assert_eq!((ok, text.as_str()), (true, "allocated 300 MiB"), "control");
    assert_eq!(control.finish(), Some(0));
    control.audit_complete();
    drop(control);

    let mut gw = Gw::start(json!({"memoryMb": 128}), json!({}));
    let (ok, text) = gw.call("faulty__hog", json!({"mb": 300}));
    assert!(!ok, "{text}");
    assert!(
        text.contains("server `faulty` exited or closed its connection before answering")
            && text.contains("memory limit reached (128 MB, sandbox.limits.memoryMb)"),
        "the call names the limit: {text}"
    );
    gw.still_healthy("memory limit");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

/// The existing `sandbox.limits.cpuSeconds`: the kernel's SIGXCPU ends the server, and the
/// call it was running is told it was the CPU limit. Control: the same spin succeeds
/// without the limit.
#[test]
fn a_cpu_limit_kill_tells_the_in_flight_call_why() {
    let mut control = Gw::start(Value::Null, json!({}));
    let (ok, text) = control.call("faulty__spin", json!({"after": 3}));
    assert!(ok && text.starts_with("spun "), "control: {text}");
    assert_eq!(control.finish(), Some(0));
    control.audit_complete();
    drop(control);

    let mut gw = Gw::start(json!({"cpuSeconds": 2}), json!({}));
    let (ok, text) = gw.call("faulty__spin", json!({"after": 30}));
    assert!(!ok, "{text}");
    assert!(
        text.contains("server `faulty` exited or closed its connection before answering")
            && text.contains("CPU time limit reached (2 s, sandbox.limits.cpuSeconds)"),
        "the call names the limit: {text}"
    );
    gw.still_healthy("cpu limit");
    assert_eq!(gw.finish(), Some(0));
    gw.audit_complete();
}

// A server that ignores both the end of its stdin and SIGTERM does not hold the gateway's
// exit: when the agent leaves, palisade closes the server's stdin, waits its grace, then asks
// harder with SIGTERM to the sandbox's process group; every process of the server is reaped
// and palisade exits 0. (Under bubblewrap the sandbox's own process ends on SIGTERM and
// takes the server with it, so the SIGKILL after a second grace is not reached here.) The
// control is the same server answering a call first: the environment marks its process,
// and it is found running before the stop.
#[test]
fn a_server_that_ignores_its_stdins_end_and_sigterm_is_stopped_at_shutdown() {
    let marker = format!("FAULTY_STUBBORN=stubborn-{}", std::process::id());
    let (key, value) = marker.split_once('=').unwrap();
    let mut gw = Gw::start_with(Value::Null, json!({}), json!({ key: value }), true);
    gw.still_healthy("a stubborn server");
    let running = processes_with_env(&marker);
    assert_eq!(gw.finish(), Some(0), "palisade exits 0");
    let log = gw.stderr_text();
    assert!(!running.is_empty(), "the marked server ran: {log}");
    assert!(
        log.contains("did not exit after stdin closed; sent SIGTERM"),
        "it was asked harder after its grace: {log}"
    );
    assert_eq!(
        processes_with_env(&marker),
        Vec::<i32>::new(),
        "left running: {log}"
    );
}
