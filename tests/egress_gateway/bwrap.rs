//! Servers in bubblewrap through `palisade serve`: each reaches exactly its allowlist and the
//! refusals reach the agent and the audit; without socat, enforce refuses and warn shares the
//! host network; a server cannot borrow another server's egress socket.

use serde_json::{json, Value};

use crate::egress_support::http_origin;
use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_reach_exactly_their_allowlist_and_refusals_reach_the_agent_and_the_audit() {
    let Some(python) = prerequisites() else {
        return;
    };
    let origin = http_origin().await;
    let port = origin.port();
    let redirect = redirect_origin(&format!("http://denied.test:{port}/page")).await;
    let dir = tempfile::tempdir().unwrap();
    let tmp = private_tmp(dir.path());
    let allowed = format!("http://allowed.test:{port}");
    let denied = format!("http://denied.test:{port}");
    let other = format!("http://other.test:{port}");
    let fetch = deps().join("venv/bin/mcp-server-fetch");
    let servers = json!({
        "net": {"command": python.display().to_string(), "args": [net_probe()],
                "sandbox": {"network": {"allowedDomains": [format!("allowed.test:{port}")]}}},
        "other": {"command": python.display().to_string(), "args": [net_probe()],
                  "sandbox": {"network": {"allowedDomains": [format!("other.test:{port}")]}}},
        "fetch": {"command": fetch.display().to_string(), "args": ["--ignore-robots-txt"],
                  "sandbox": {"network": {"allowedDomains": [format!("allowed.test:{port}"), format!("allowed.test:{redirect}")]}}}
    });
    let calls = json!([
        http_get("net__http_get", &format!("{allowed}/env"), "env"),
        http_get("net__http_get", &format!("{allowed}/socks"), "socks"),
        http_get("net__http_get", &format!("{denied}/env"), "env"),
        http_get("net__http_get", &format!("{denied}/socks"), "socks"),
        call("net__connect", json!({"host": "127.0.0.1", "port": port})),
        http_get(
            "net__http_get",
            &format!("http://127.0.0.1:{port}/lit"),
            "socks"
        ),
        call("net__resolve", json!({"name": "allowed.test"})),
        call("net__udp", json!({"host": "192.0.2.1", "port": 53})),
        http_get("net__http_get", &format!("{other}/x"), "env"),
        http_get("other__http_get", &format!("{other}/mine"), "env"),
        http_get("other__http_get", &format!("{allowed}/theirs"), "env"),
        call("net__proxy_env", json!({})),
        call(
            "fetch__fetch",
            json!({"url": format!("{allowed}/page"), "raw": true})
        ),
        // The policy engine gates a fetch of denied.test before it reaches the server (its
        // domain gate); an allowed page that redirects there is the sandbox's to stop.
        call(
            "fetch__fetch",
            json!({"url": format!("http://allowed.test:{redirect}/jump"), "raw": true})
        ),
    ]);
    let tmp_env = tmp.display().to_string();
    let r = serve(
        dir.path(),
        &python,
        servers,
        json!({}),
        calls,
        &[("TMPDIR", &tmp_env)],
    )
    .await;
    let c = |i: usize| {
        (
            r.calls[i]["error"].as_bool().unwrap(),
            r.calls[i]["text"].as_str().unwrap().to_string(),
        )
    };
    assert!(
        r.tools.contains(&"fetch__fetch".to_string()),
        "{:?}\n{}",
        r.tools,
        r.stderr
    );

    // Allowed: HTTP_PROXY and SOCKS5 (remote DNS) both reach the origin under the checked name.
    let (err, text) = c(0);
    assert!(
        !err && text.contains(&format!(
            "origin saw [GET /env HTTP/1.1] host [allowed.test:{port}]"
        )),
        "{text}\n{}",
        r.stderr
    );
    let (err, text) = c(1);
    assert!(
        !err && text.contains("origin saw [GET /socks HTTP/1.1]"),
        "{text}"
    );

    // Denied name, over both protocols: the agent reads which host and the entry to add.
    for i in [2, 3] {
        let (err, text) = c(i);
        assert!(err, "{text}");
        assert!(
            text.starts_with(&format!(
                "[SANDBOX BLOCKED] network access to denied.test:{port} denied for server \"net\""
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "add \"denied.test:{port}\" to sandbox.network.allowedDomains"
            )),
            "{text}"
        );
        assert!(!text.contains("origin saw"), "{text}");
    }
    // No way around the proxy: raw IP connect, an IP literal through it, DNS, UDP.
    let (err, text) = c(4);
    assert!(err && text.contains("connect:"), "{text}");
    let (err, text) = c(5);
    assert!(
        err && text.contains("[SANDBOX BLOCKED] network access to 127.0.0.1"),
        "{text}"
    );
    let (err, text) = c(6);
    assert!(err && text.contains("resolve:"), "{text}");
    let (err, text) = c(7);
    assert!(err && text.contains("udp:"), "{text}");
    // Another server's allowlist is not this server's, in either direction.
    let (err, text) = c(8);
    assert!(
        err && text.contains("network access to other.test"),
        "{text}"
    );
    let (err, text) = c(9);
    assert!(!err && text.contains("GET /mine"), "{text}");
    let (err, text) = c(10);
    assert!(
        err && text.contains("denied for server \"other\""),
        "{text}"
    );
    let (_, text) = c(11);
    assert!(
        text.contains("HTTP_PROXY=http://127.0.0.1:3128")
            && text.contains("ALL_PROXY=socks5h://127.0.0.1:1080"),
        "{text}"
    );
    // The real mcp-server-fetch: allowed page fetched, denied one refused and marked.
    let (err, text) = c(12);
    assert!(
        !err && text.contains("origin saw [GET /page HTTP/1.1]"),
        "{text}\n{}",
        r.stderr
    );
    let (err, text) = c(13);
    assert!(
        err && text.contains(&format!(
            "[SANDBOX BLOCKED] network access to denied.test:{port} denied for server \"fetch\""
        )),
        "{text}"
    );

    // Audit: one record per call; the refused hosts listed on exactly the refused calls.
    assert_eq!(r.audit.len(), 14, "{:#?}", r.audit);
    let refusals = |i: usize| {
        r.audit[i]
            .get("networkRefusals")
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(refusals(0), Value::Null);
    assert_eq!(refusals(2)[0]["host"], "denied.test");
    assert_eq!(refusals(2)[0]["port"], port);
    assert_eq!(refusals(2)[0]["protocol"], "http-forward");
    assert_eq!(refusals(3)[0]["protocol"], "socks5");
    assert_eq!(refusals(5)[0]["host"], "127.0.0.1");
    assert_eq!(refusals(10)[0]["host"], "allowed.test");
    assert_eq!(r.audit[10]["serverName"], "other");
    assert_eq!(refusals(13)[0]["host"], "denied.test");
    assert!(
        r.audit.iter().all(|a| a["sandboxed"] == true),
        "{:#?}",
        r.audit
    );
    // The refusals are in palisade's log with server and host.
    assert!(r.stderr.contains("egress refused"), "{}", r.stderr);
    // Nothing left behind: the socket directory is gone.
    assert_socket_dir_used_and_removed(&tmp, &r.stderr);
}

/// Without socat the allowlist cannot be enforced: enforce refuses the server (it never
/// starts), warn runs it in the sandbox but with the host network, and says so in the log
/// and in every audit record. The warn run is also the control for the refusals above: with
/// the host network the raw connect to the origin succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_socat_enforce_refuses_and_warn_shares_the_host_network_loudly() {
    let Some(python) = prerequisites() else {
        return;
    };
    let origin = http_origin().await;
    let port = origin.port();
    // A PATH with bwrap but no socat.
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(which::which("bwrap").unwrap(), bin.path().join("bwrap")).unwrap();
    let path = bin.path().display().to_string();
    let servers = json!({
        "net": {"command": python.display().to_string(), "args": [net_probe()],
                "sandbox": {"network": {"allowedDomains": [format!("allowed.test:{port}")]}}},
    });
    let calls = json!([call(
        "net__connect",
        json!({"host": "127.0.0.1", "port": port})
    )]);

    let dir = tempfile::tempdir().unwrap();
    let r = serve(
        dir.path(),
        &python,
        servers.clone(),
        json!({}),
        calls.clone(),
        &[("PATH", &path)],
    )
    .await;
    assert!(r.tools.is_empty(), "{:?}", r.tools);
    assert!(r.calls[0]["error"] == true, "{:?}", r.calls);
    assert!(r.stderr.contains("socat is not installed"), "{}", r.stderr);

    let dir = tempfile::tempdir().unwrap();
    let r = serve(
        dir.path(),
        &python,
        servers,
        json!({"sandboxPolicy": "warn"}),
        calls,
        &[("PATH", &path)],
    )
    .await;
    assert_eq!(r.calls[0]["error"], false, "{:?}\n{}", r.calls, r.stderr);
    assert_eq!(r.calls[0]["text"], "connected");
    assert!(r.stderr.contains("socat is not installed"), "{}", r.stderr);
    assert_eq!(r.audit.len(), 1);
    assert_eq!(r.audit[0]["sandboxed"], false);
    assert_eq!(r.audit[0]["sandboxBackend"], "bwrap");
    let degradation = r.audit[0]["degradation"].to_string();
    assert!(
        degradation.contains("socat is not installed"),
        "{degradation}"
    );
}

/// Attack: a server whose grants show /tmp looks for another server's egress socket there
/// and uses it as its proxy (same uid inside and out, so the directory's 0700 would not stop
/// it). Every sandbox masks the socket directory. Control: the same probe in an opted-out
/// (unsandboxed) server finds the socket and reaches the other server's allowed origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_cannot_borrow_another_servers_egress_socket() {
    let Some(python) = prerequisites() else {
        return;
    };
    let origin = http_origin().await;
    let port = origin.port();
    let dir = tempfile::tempdir().unwrap();
    let tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap();
    // A name only this gateway uses: other tests' gateways run at the same time, and their
    // socket directories are not this gateway's to hide (see docs/network.md, Known limits).
    let victim = format!("victim{port}");
    let servers = json!({
        victim.clone(): {"command": python.display().to_string(), "args": [net_probe()],
                "sandbox": {"network": {"allowedDomains": [format!("allowed.test:{port}")]}}},
        "nosy": {"command": python.display().to_string(), "args": [net_probe()],
                 "sandbox": {"filesystem": {"allowRead": [tmp.display().to_string()]}}},
        "open": {"command": python.display().to_string(), "args": [net_probe()], "sandbox": false},
    });
    // Disguised (`glob:`, dropped by the probe): a plain path would be judged by the
    // gateway's policy, and this test is about what the sandbox alone hides.
    let pattern = format!("glob:{}/palisade-egress-*/*-{victim}.sock", tmp.display());
    let steal = json!({"pattern": pattern, "address": format!("http://allowed.test:{port}/steal")});
    let calls = json!([
        call("nosy__unix_get", steal.clone()),
        call("open__unix_get", steal),
    ]);
    let r = serve(dir.path(), &python, servers, json!({}), calls, &[]).await;
    let text = |i: usize| r.calls[i]["text"].as_str().unwrap().to_string();
    assert_eq!(text(0), "no socket found", "{}", r.stderr);
    assert!(
        text(1).contains("origin saw [GET /steal HTTP/1.1]"),
        "control: {}",
        text(1)
    );
}
