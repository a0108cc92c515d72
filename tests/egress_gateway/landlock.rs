//! The Landlock tier's way out, where there is no network namespace: each server reaches the
//! egress proxy on its own loopback port with its own secret, through `palisade serve` and
//! `palisade run --backend landlock --allow-domain`, and the ways around it are refused.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::egress_support::http_origin;
use crate::*;

/// A run of 48 hex digits standing alone (a proxy secret's shape; sha256 digests are longer).
fn secret_shaped(text: &str) -> Vec<String> {
    regex::Regex::new(r"(?:^|[^0-9a-fA-F])([0-9a-f]{48})(?:[^0-9a-fA-F]|$)")
        .unwrap()
        .captures_iter(text)
        .map(|c| c[1].to_string())
        .collect()
}

/// `backend: landlock` through `palisade serve`: no network namespace, so each server
/// reaches the egress proxy on its own loopback port with its own secret (the proxy
/// variables say where). Each reaches exactly its allowlist over HTTP and SOCKS5, refusals
/// reach the agent and the audit attributed to the right server, and the raw ways around
/// the proxy (a TCP connect to another loopback port, UDP) are refused. Control: the same
/// probes from an opted-out server succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_landlock_servers_reach_exactly_their_allowlist_through_their_own_proxy_port() {
    let python = deps().join("venv/bin/python");
    if !python.exists() {
        skip::skip(&format!("no test venv at {}", python.display()));
        return;
    }
    if landlock_allowlist(
        "under_landlock_servers_reach_exactly_their_allowlist_through_their_own_proxy_port",
    )
    .is_none()
    {
        return;
    }
    let origin = http_origin().await;
    let port = origin.port();
    let dir = tempfile::tempdir().unwrap();
    let tmp = private_tmp(dir.path());
    let allowed = format!("http://allowed.test:{port}");
    let denied = format!("http://denied.test:{port}");
    let other = format!("http://other.test:{port}");
    // enforce: palisade checks each connect's address (`connect_gate`), so the tier holds
    // an allowlist.
    let landlock = |domain: &str| {
        json!({"command": python.display().to_string(), "args": [net_probe()],
               "sandbox": {"backend": "landlock", "policy": "enforce",
                           "network": {"allowedDomains": [format!("{domain}:{port}")]}}})
    };
    let servers = json!({
        "net": landlock("allowed.test"),
        "other": landlock("other.test"),
        "open": {"command": python.display().to_string(), "args": [net_probe()], "sandbox": false},
    });
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let calls = json!([
        http_get("net__http_get", &format!("{allowed}/env"), "env"),
        http_get("net__http_get", &format!("{allowed}/socks"), "socks"),
        http_get("net__http_get", &format!("{denied}/env"), "env"),
        http_get("net__http_get", &format!("{denied}/socks"), "socks"),
        call("net__connect", json!({"host": "127.0.0.1", "port": port})),
        call("net__udp", json!({"host": "127.0.0.1", "port": udp_port})),
        http_get("other__http_get", &format!("{allowed}/theirs"), "env"),
        http_get("other__http_get", &format!("{other}/mine"), "env"),
        call("open__connect", json!({"host": "127.0.0.1", "port": port})),
        call("open__udp", json!({"host": "127.0.0.1", "port": udp_port})),
    ]);
    let tmp_env = tmp.display().to_string();
    let r = serve(
        dir.path(),
        &python,
        servers,
        json!({}),
        calls,
        &[("TMPDIR", &tmp_env), ("RUST_LOG", "debug,rmcp=warn")],
    )
    .await;
    let c = |i: usize| {
        (
            r.calls[i]["error"].as_bool().unwrap(),
            r.calls[i]["text"].as_str().unwrap().to_string(),
        )
    };
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
    for i in [2, 3] {
        let (err, text) = c(i);
        assert!(
            err && text.starts_with(&format!(
                "[SANDBOX BLOCKED] network access to denied.test:{port} denied for server \"net\""
            )),
            "{text}"
        );
    }
    // Around the proxy: another loopback port (palisade's connect checks, which tell the
    // agent as the proxy does), UDP (seccomp).
    let (err, text) = c(4);
    assert!(err && text.contains("connect:"), "{text}");
    assert!(
        text.contains(&format!(
            "[SANDBOX BLOCKED] network access to 127.0.0.1:{port} denied for server \"net\": not through the egress proxy"
        )),
        "{text}"
    );
    let (err, text) = c(5);
    assert!(err && text.contains("udp: [Errno 1]"), "{text}");
    // Each server has its own port and lists.
    let (err, text) = c(6);
    assert!(
        err && text.contains("denied for server \"other\""),
        "{text}"
    );
    let (err, text) = c(7);
    assert!(!err && text.contains("GET /mine"), "{text}");
    // Control: unsandboxed, the same connect and datagram go through.
    assert_eq!(c(8), (false, "connected".to_string()));
    assert_eq!(c(9), (false, "sent".to_string()));
    let mut buf = [0u8; 8];
    udp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let (n, _) = udp.recv_from(&mut buf).expect("the control's datagram");
    assert_eq!(&buf[..n], b"x");

    assert_eq!(r.audit.len(), 10, "{:#?}", r.audit);
    for i in 0..8 {
        assert_eq!(
            r.audit[i]["sandboxBackend"], "landlock",
            "{:#?}",
            r.audit[i]
        );
    }
    let refusals = |i: usize| {
        r.audit[i]
            .get("networkRefusals")
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(refusals(0), Value::Null);
    assert_eq!(refusals(2)[0]["host"], "denied.test");
    assert_eq!(refusals(2)[0]["protocol"], "http-forward");
    assert_eq!(refusals(3)[0]["protocol"], "socks5");
    assert_eq!(refusals(6)[0]["host"], "allowed.test");
    assert_eq!(refusals(4)[0]["host"], "127.0.0.1");
    assert_eq!(refusals(4)[0]["port"], port);
    assert_eq!(refusals(4)[0]["protocol"], "connect");
    assert_eq!(r.audit[6]["serverName"], "other");
    assert!(
        r.stderr
            .contains("TCP connect to the egress proxy's loopback endpoint only, each connect checked by palisade"),
        "{}",
        r.stderr
    );
    // The secrets are in no log line and no audit record.
    let audit_text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert_eq!(secret_shaped(&r.stderr), Vec::<String>::new());
    assert_eq!(secret_shaped(&audit_text), Vec::<String>::new());
    assert_socket_dir_used_and_removed(&tmp, &r.stderr);
}

/// The probe both runs below use: the network probes shared with the attack suite's hostile
/// server (`tests/attacks/netprobe.py`), one JSON object on stdout; the proxy rows only when
/// the proxy variables are set (inside the sandbox).
fn netprobe() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/attacks/netprobe.py")
}

/// Attacks on the Landlock tier's way out (`palisade run --backend landlock --allow-domain`),
/// each with its control. Inside: the allowed name is reached through the proxy variables
/// and the denied one refused (403); the proxy's port without the secret, or with a wrong
/// one, is answered 407 over HTTP and refused over SOCKS5 (control: the same requests with
/// the secret are served); a TCP connect
/// to another loopback port (the origin's) is refused by palisade's connect checks, UDP, `listen()` and a TCP
/// Fast Open connect by seccomp. Control: the same probe run directly connects, sends the
/// datagram (received here), listens and connects by Fast Open. The secret the server was
/// given appears nowhere in palisade's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_landlock_run_allows_only_the_proxy_port_and_the_proxy_only_its_secret() {
    if landlock_allowlist(
        "under_landlock_run_allows_only_the_proxy_port_and_the_proxy_only_its_secret",
    )
    .is_none()
    {
        return;
    }
    let Ok(python) = which::which("python3") else {
        skip::skip("python3 is not installed");
        return;
    };
    let origin = http_origin().await;
    let port = origin.port();
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 allowed.test denied.test\n").unwrap();
    let tmp = private_tmp(dir.path());
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let allowed = format!("http://allowed.test:{port}/in");
    let probe_args = [
        netprobe().display().to_string(),
        port.to_string(),
        udp_port.to_string(),
        allowed.clone(),
    ];
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .env("TMPDIR", &tmp)
        .env("RUST_LOG", "debug")
        .args([
            "run",
            "--backend",
            "landlock",
            "--sandbox-policy",
            "enforce",
        ])
        .arg("--allow-domain")
        .arg(format!("allowed.test:{port}"))
        .arg("--egress-hosts-file")
        .arg(&hosts)
        .arg("--ro")
        .arg(netprobe().parent().unwrap())
        .arg("--")
        .arg(&python)
        .args(&probe_args)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let inside: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    let row = |k: &str| inside[k].as_str().unwrap_or_default().to_string();
    assert_eq!(
        row("allowed"),
        format!("origin saw [GET /in HTTP/1.1] host [allowed.test:{port}]"),
        "{inside}\n{stderr}"
    );
    assert!(row("denied").contains("403"), "{inside}");
    assert!(stderr.contains("egress refused"), "{stderr}");
    assert_eq!(
        row("no_secret"),
        "HTTP/1.1 407 Proxy Authentication Required",
        "{inside}"
    );
    assert_eq!(
        row("wrong_secret"),
        "HTTP/1.1 407 Proxy Authentication Required",
        "{inside}"
    );
    assert_eq!(row("with_secret"), "HTTP/1.1 200 OK", "control: {inside}");
    // SOCKS5 on the same port: no method without credentials, failure with wrong ones.
    assert_eq!(row("socks_no_auth"), "05ff", "{inside}");
    assert_eq!(row("socks_wrong_secret"), "05020101", "{inside}");
    assert_eq!(row("socks_with_secret"), "05020100", "control: {inside}");
    assert!(row("direct").contains("PermissionError"), "{inside}");
    assert!(row("udp").contains("[Errno 1]"), "{inside}");
    assert!(row("listen").contains("[Errno 1]"), "{inside}");
    assert!(row("fastopen").contains("[Errno 1]"), "{inside}");
    // The secret: 48 hex digits, given to the server, in no line of palisade's debug log.
    let secret = row("secret");
    assert_eq!(secret.len(), 48, "{inside}");
    assert!(!stderr.contains(&secret), "the secret is logged:\n{stderr}");
    assert_socket_dir_used_and_removed(&tmp, &stderr);

    // Control: the same probe, unsandboxed, gets through every way.
    let out = tokio::process::Command::new(&python)
        .args(&probe_args)
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .output()
        .await
        .unwrap();
    let outside: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outside["direct"], "connected", "{outside}");
    assert_eq!(outside["udp"], "sent", "{outside}");
    assert!(
        outside["listen"]
            .as_str()
            .unwrap()
            .starts_with("listening on"),
        "{outside}"
    );
    assert_eq!(outside["fastopen"], "HTTP/1.1 200 OK", "{outside}");
    let mut buf = [0u8; 8];
    let (n, _) = udp.recv_from(&mut buf).expect("the control's datagram");
    assert_eq!(&buf[..n], b"probe");
}
