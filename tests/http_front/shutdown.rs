//! SIGTERM with calls in flight: the drain refuses new requests, a call within shutdownGrace
//! finishes with its result, one past it ends with an error saying why, and every server
//! process is reaped before palisade exits 0.

use serde_json::{json, Value};

use crate::fixtures::{faulty_config, processes_tagged, sleep_call, tokens_file, ALICE, BOB};
use crate::front::{post, wait_log, Front};
use crate::support::{self, Workspace};

/// How long a stop gets to show (a guard against a hang, never a timing assertion).
const SETTLE: std::time::Duration = std::time::Duration::from_secs(30);

// SIGTERM while a slow call is in flight: new requests get 503, the call completes with its
// result (within shutdownGrace), every server process is reaped and palisade exits 0.
#[test]
fn sigterm_mid_call_lets_the_call_finish_refuses_new_requests_and_reaps_every_server() {
    let ws = Workspace::new();
    let (config, _, tag) = faulty_config(&ws, json!({"shutdownGrace": 60}));
    let tokens = tokens_file(&ws);
    let mut front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    // Bob's servers run too, idle: they must be reaped as well.
    let bob = front.client(BOB, json!([]));
    let session = front.session(ALICE);
    let addr = front.addr;
    let call = std::thread::spawn(move || post(addr, ALICE, Some(&session), &sleep_call(1, 3.0)));
    let started = wait_log(&ws, "sleep: started", 1);
    let servers_running = processes_tagged(&tag).len();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(front.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let draining = wait_log(&ws, "shutdown requested", 1);
    let (refused, refused_text) = front.post(BOB, None, &sleep_call(2, 0.0));
    let (call_status, call_text) = call.join().unwrap();
    let status = support::raw::wait_bounded(&mut front.child);
    let err = ws.stderr_text();
    assert!(bob.get("error").is_none(), "{bob}\n{err}");
    assert!(started && draining, "{err}");
    assert!(servers_running >= 2, "alice's and bob's servers run");
    assert_eq!(call_status, 200, "{call_text}\n{err}");
    assert!(
        call_text.contains("slept"),
        "the call in flight completed with its result: {call_text}\n{err}"
    );
    assert_eq!(
        refused, 503,
        "a new request during the drain: {refused_text}"
    );
    assert!(status.success(), "exit {status}\n{err}");
    assert_eq!(
        processes_tagged(&tag),
        Vec::<String>::new(),
        "servers left running"
    );
}

// SIGTERM while a call runs longer than shutdownGrace: past the grace the call ends with an
// error saying why (not a cut stream), every server process is reaped and palisade exits 0.
#[test]
fn sigterm_past_the_grace_ends_the_call_with_an_error_and_reaps_every_server() {
    let ws = Workspace::new();
    let (config, _, tag) = faulty_config(&ws, json!({"shutdownGrace": 1}));
    let tokens = tokens_file(&ws);
    let mut front = Front::start(&ws, &config, &["--tokens", tokens.to_str().unwrap()]);
    let session = front.session(ALICE);
    let addr = front.addr;
    let call = std::thread::spawn(move || post(addr, ALICE, Some(&session), &sleep_call(1, 600.0)));
    let started = wait_log(&ws, "sleep: started", 1);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(front.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let (call_status, call_text) = call.join().unwrap();
    let status = support::raw::wait_bounded(&mut front.child);
    let err = ws.stderr_text();
    assert!(started, "{err}");
    assert_eq!(call_status, 200, "{call_text}\n{err}");
    let answer: Value = call_text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|m| m["id"] == 1)
        .unwrap_or_else(|| panic!("the call got no answer: {call_text}\n{err}"));
    assert!(
        answer.get("error").is_some() || answer["result"]["isError"] == true,
        "the cut call ends with an error: {answer}"
    );
    assert!(!call_text.contains("slept"), "{call_text}");
    assert!(err.contains("shutdownGrace (1s) is over"), "{err}");
    assert_eq!(answer["error"]["code"], -32006, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("did not finish within shutdownGrace"),
        "{answer}"
    );
    assert!(status.success(), "exit {status}\n{err}");
    assert_eq!(
        processes_tagged(&tag),
        Vec::<String>::new(),
        "servers left running"
    );
}

// A principal's first request whose client goes away while the principal's servers are
// still starting: the start goes on, and the principal's next request joins it (one set of
// servers, the same processes) instead of starting a second set; with nobody back, the idle
// reaper stops them. Before, the start was cut with the request: its servers were stopped
// while the next request launched a second set, and a client whose timeout was shorter than
// the start could never get its servers started.
#[test]
fn a_principals_start_given_up_by_its_client_is_joined_by_its_next_request() {
    use std::io::Write;
    let ws = Workspace::new();
    let (front, tag) = front_whose_server_lists_slowly(&ws, 4, &["--idle-timeout", "2"]);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params":
        {"protocolVersion": "2025-11-25", "capabilities": {},
         "clientInfo": {"name": "gives-up", "version": "1"}}});
    let body = init.to_string();
    let mut conn = std::net::TcpStream::connect(front.addr).unwrap();
    write!(
        conn,
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {ALICE}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\n\r\n{body}",
        front.addr,
        body.len()
    )
    .unwrap();
    // The processes' ids (their command lines are long and all alike).
    let pids = |tag: &str| -> Vec<String> {
        processes_tagged(tag)
            .iter()
            .map(|p| p.split(':').next().unwrap_or_default().to_string())
            .collect()
    };
    let launched = support::eventually(SETTLE, || ws.stderr_text().contains("tools/list: delayed"));
    let first_set = pids(&tag);
    // The client goes away while the server is still listing; the same principal comes back.
    conn.shutdown(std::net::Shutdown::Both).unwrap();
    drop(conn);
    let (code, text) = front.post(ALICE, None, &init);
    let second_set = pids(&tag);
    let starts = ws
        .stderr_text()
        .matches("servers started for a new principal")
        .count();
    // Nobody comes back after that: the idle reaper stops the servers.
    let reaped = support::eventually(SETTLE, || processes_tagged(&tag).is_empty());
    let status = front.stop();
    let err = ws.stderr_text();
    assert!(
        launched && !first_set.is_empty(),
        "the server was launched: {err}"
    );
    assert_eq!(code, 200, "the next request got the servers: {text}\n{err}");
    assert_eq!(
        second_set, first_set,
        "the next request was served by the start the first began: {err}"
    );
    assert_eq!(starts, 1, "one start for the principal: {err}");
    assert!(reaped, "the servers still run past idleTimeout: {err}");
    assert!(status.success(), "exit {status}\n{err}");
}

/// A front whose faulty server (tagged with the returned tag) takes `delay` seconds over its
/// listing, so a principal's start waits for it; `flags` are added to `serve`'s.
fn front_whose_server_lists_slowly(ws: &Workspace, delay: u32, flags: &[&str]) -> (Front, String) {
    let (config, _, tag) = faulty_config(ws, json!({}));
    let mut v: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    v["mcpServers"]["faulty"]["env"] =
        json!({"FAULTY_PAGES": "1", "FAULTY_PAGE_DELAY": delay.to_string()});
    v["palisade"]["startupTimeout"] = json!(60);
    support::write_json(&config, &v);
    let tokens = tokens_file(ws);
    let mut args = vec!["--tokens", tokens.to_str().unwrap()];
    args.extend_from_slice(flags);
    let front = Front::start(ws, &config, &args);
    (front, tag)
}

// SIGTERM while a principal's servers are still starting (its first request waits on a
// listing that takes 40 s): the start is cut short, the request is answered 503 at once,
// its servers are stopped politely (stdin closed, then SIGTERM after the grace) before
// palisade exits 0 with no server left. Before, the start ran on past the drain, which does
// not see a principal that has not started, and its servers were SIGKILLed when the process
// ended; later the 503 waited for the stop's grace and could lose the race with the drain's
// bound on open connections (both 3 s), leaving the request with no answer.
#[test]
fn sigterm_while_a_principal_starts_stops_its_servers_politely() {
    let ws = Workspace::new();
    let (mut front, tag) = front_whose_server_lists_slowly(&ws, 40, &[]);
    let addr = front.addr;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params":
        {"protocolVersion": "2025-11-25", "capabilities": {},
         "clientInfo": {"name": "waits", "version": "1"}}});
    let first = std::thread::spawn(move || post(addr, ALICE, None, &init));
    // Once the server sleeps in its listing (it cannot read its stdin's end then).
    let launched = support::eventually(SETTLE, || ws.stderr_text().contains("tools/list: delayed"));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(front.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let (status_code, text) = first.join().unwrap();
    let status = support::raw::wait_bounded(&mut front.child);
    let err = ws.stderr_text();
    assert!(launched, "the server was launched: {err}");
    assert_eq!(status_code, 503, "{text}\n{err}");
    assert!(status.success(), "exit {status}\n{err}");
    assert!(
        err.contains("did not exit after stdin closed; sent SIGTERM"),
        "stopped politely: {err}"
    );
    assert_eq!(processes_tagged(&tag), Vec::<String>::new(), "{err}");
}
