//! Servers slow to start or to list (issue 23, finding 5): a slow server joins late instead
//! of holding up the agent, and a slow or bloated listing is cut at one deadline and a cap.

use serde_json::{json, Value};

use crate::gw::*;
use crate::processes_with_env;

/// Issue 23, finding 5 (regression: `serve` answered the agent's `initialize` only once every
/// server was up, so one slow server held up the healthy ones). With `readyTimeout` 1 the
/// agent is answered while a server that lists for about 6 s is still starting: the healthy
/// server's tools are there, the slow one's are not, and it joins later, announced with
/// `notifications/tools/list_changed`. The control: without `readyTimeout` the agent waits,
/// and its first list has the slow server's tools.
#[test]
fn a_slow_server_joins_late_instead_of_holding_up_the_agent() {
    let slow = json!({"FAULTY_PAGES": "20", "FAULTY_PAGE_DELAY": "0.3"});
    let mut gw = Gw::start_with(
        Value::Null,
        json!({"startupTimeout": 30, "readyTimeout": 1}),
        slow.clone(),
        false,
    );
    let first = gw.tools();
    assert!(first.iter().any(|t| t == "fs__list_roots"), "{first:?}");
    assert!(
        !first.iter().any(|t| t.starts_with("faulty__")),
        "the slow server was waited for: {first:?}"
    );
    gw.wait_listed("faulty__page19");
    assert!(
        gw.from_gateway
            .iter()
            .any(|m| m["method"] == "notifications/tools/list_changed"),
        "the late server's tools were not announced: {:?}",
        gw.from_gateway
    );
    gw.finish();

    // Control: the default waits for every server.
    let mut gw = Gw::start_with(Value::Null, json!({"startupTimeout": 30}), slow, false);
    let first = gw.tools();
    assert!(first.iter().any(|t| t == "faulty__page19"), "{first:?}");
    gw.finish();
}

/// Issue 23, finding 5 (regression: `startupTimeout` applied per page of a listing, so a
/// slow-paging server took as long as it liked, and pages piled up without bound). A server
/// paging 40 slow pages (12 s in all, each page well within the 3 s startupTimeout) is cut
/// at one 3 s deadline for the whole listing; one paging 20 pages of 1 MiB descriptions is
/// cut at the listing cap. Neither is listed; the other server is. The control: the same
/// server with 3 slow pages (0.9 s) is listed.
#[test]
fn a_slow_or_bloated_listing_is_cut_at_one_deadline_and_a_cap() {
    let slow = json!({"FAULTY_PAGES": "40", "FAULTY_PAGE_DELAY": "0.3"});
    // Paced (20 MiB over about a second) under the output-rate limit, as in the review.
    let big =
        json!({"FAULTY_PAGES": "20", "FAULTY_PAGE_BYTES": "1048576", "FAULTY_PAGE_DELAY": "0.05"});
    // The bloated listing gets a deadline it cannot reach first: on a loaded machine its
    // 20 MiB can take longer than 3 s, and then the deadline, not the cap, would cut it.
    for (env, timeout, want) in [
        (slow, 3, "the listing did not finish within 3s"),
        (big, 60, "its lists exceed the cap"),
    ] {
        let mut gw = Gw::start_with(
            Value::Null,
            json!({"startupTimeout": timeout}),
            env.clone(),
            false,
        );
        assert!(gw.wait_stderr(want), "{env}: {}", gw.stderr_text());
        let tools = gw.tools();
        assert!(
            !tools.iter().any(|t| t.starts_with("faulty__")),
            "{env}: {tools:?}"
        );
        assert!(tools.iter().any(|t| t == "fs__list_roots"), "{tools:?}");
        gw.finish();
    }
    // Control: a short slow listing completes.
    let mut gw = Gw::start_with(
        Value::Null,
        json!({"startupTimeout": 3}),
        json!({"FAULTY_PAGES": "3", "FAULTY_PAGE_DELAY": "0.3"}),
        true,
    );
    let tools = gw.tools();
    assert!(tools.iter().any(|t| t == "faulty__page2"), "{tools:?}");
    gw.finish();
}

/// SIGTERM while a server is still starting (it answers `initialize` a minute late):
/// palisade stops it politely and exits 0, leaving no process of it behind. Before, the
/// signal handlers were installed only once every server had started, so SIGTERM killed
/// palisade where it stood (exit by signal), its servers left to die with it and its
/// sandbox scratch left behind.
#[test]
fn sigterm_while_servers_start_stops_them_and_exits_cleanly() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("FAULTY_SLOW_START=slow-{}", std::process::id());
    let (key, value) = marker.split_once('=').unwrap();
    let servers = json!({"faulty": {
        "command": crate::deps().join("venv/bin/python"),
        "args": [crate::faulty_server()],
        "env": {"FAULTY_INIT_DELAY": "60", key: value},
    }});
    let settings = json!({
        "sandboxDir": dir.path().join("sandbox"),
        "sandboxPolicy": "warn",
        "policy": crate::repo_path("tests/fixtures/allow-all-policy.json"),
        "startupTimeout": 120,
    });
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        serde_json::to_vec(&json!({"mcpServers": servers, "palisade": settings})).unwrap(),
    )
    .unwrap();
    let errlog = dir.path().join("serve-stderr.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["serve", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info,rmcp=warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&errlog).unwrap())
        .spawn()
        .unwrap();
    let started = crate::support::eventually(crate::ANSWER_LIMIT, || {
        !processes_with_env(&marker).is_empty()
    });
    // Once it sleeps in `initialize` (it cannot read its stdin's end then).
    let delayed = crate::support::eventually(crate::ANSWER_LIMIT, || {
        std::fs::read_to_string(&errlog).is_ok_and(|l| l.contains("initialize: delayed"))
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let exited = crate::support::eventually(crate::ANSWER_LIMIT, || {
        !matches!(child.try_wait(), Ok(None))
    });
    if !exited {
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    let log = std::fs::read_to_string(&errlog).unwrap_or_default();
    assert!(started && delayed, "the slow server was launched: {log}");
    assert!(exited, "palisade did not exit after SIGTERM: {log}");
    assert!(status.success(), "exit {status}: {log}");
    assert!(
        log.contains("shutdown requested while the servers were starting"),
        "{log}"
    );
    // Politely: its stdin closed and a grace given before SIGTERM (it cannot read its
    // stdin's end while it sleeps in `initialize`), not SIGKILLed at once.
    assert!(
        log.contains("did not exit after stdin closed; sent SIGTERM"),
        "{log}"
    );
    assert_eq!(
        processes_with_env(&marker),
        Vec::<i32>::new(),
        "left running: {log}"
    );
}
