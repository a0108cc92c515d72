//! Network isolation end to end through `palisade serve`, driven by a real MCP client (the
//! Python `mcp` SDK): each server runs in real bubblewrap with its own empty network
//! namespace, reaches Palisade's egress proxy through real socat bridges, and gets exactly
//! its allowlist. Fake names (`allowed.test`, `denied.test`, `other.test`) resolve to a
//! loopback origin through the test-only `palisade.egressHostsFile` setting. Nothing here
//! leaves 127.0.0.1.
//!
//! Each "cannot" has a control: the same probe run by a server whose sandbox was degraded to
//! the host network (warn mode, no socat) succeeds, so the refusals are the sandbox's.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod egress_support;
#[path = "support/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};

use egress_support::http_origin;
use serde_json::{json, Value};

fn deps() -> PathBuf {
    std::env::var_os("PALISADE_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"))
}

/// bwrap, socat and the test venv; `None` (with the reason printed) skips.
fn prerequisites() -> Option<PathBuf> {
    let python = deps().join("venv/bin/python");
    for tool in ["bwrap", "socat"] {
        if which::which(tool).is_err() {
            skip::skip(&format!("{tool} is not installed"));
            return None;
        }
    }
    if !python.exists() {
        skip::skip(&format!("no test venv at {}", python.display()));
        return None;
    }
    Some(python)
}

fn net_probe() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/servers/net_probe.py")
        .display()
        .to_string()
}

struct Run {
    tools: Vec<String>,
    calls: Vec<Value>,
    audit: Vec<Value>,
    stderr: String,
}

/// Writes the config, runs `calls` through `palisade serve` with the SDK client, and returns
/// the results, the audit records and palisade's stderr.
async fn serve(
    dir: &Path,
    python: &Path,
    servers: Value,
    settings: Value,
    calls: Value,
    env: &[(&str, &str)],
) -> Run {
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, "127.0.0.1 allowed.test denied.test other.test\n").unwrap();
    let audit = dir.join("audit.jsonl");
    let mut s = json!({
        "sandboxDir": dir.join("sandbox").display().to_string(),
        "sandboxPolicy": "enforce",
        "egressHostsFile": hosts.display().to_string(),
        "auditLog": audit.display().to_string(),
        "policy": Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/allow-all-policy.json").display().to_string(),
    });
    for (k, v) in settings.as_object().unwrap() {
        s[k] = v.clone();
    }
    let cfg = dir.join("config.json");
    std::fs::write(
        &cfg,
        serde_json::to_vec_pretty(&json!({"mcpServers": servers, "palisade": s})).unwrap(),
    )
    .unwrap();
    let errlog = dir.join("stderr.log");
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/calls.py"))
        .arg(calls.to_string())
        .arg("--")
        .args([env!("CARGO_BIN_EXE_palisade"), "serve", "--config"])
        .arg(&cfg)
        .env("CALLS_ERRLOG", &errlog)
        .env("RUST_LOG", "info,rmcp=warn")
        .env("NO_COLOR", "1")
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(std::time::Duration::from_secs(240), cmd.output())
        .await
        .expect("client finished")
        .unwrap();
    let stderr = std::fs::read_to_string(&errlog).unwrap_or_default();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {}\n{stdout}\n{}\npalisade:\n{stderr}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    let audit = std::fs::read_to_string(&audit)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Run {
        tools: v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect(),
        calls: v["calls"].as_array().unwrap().clone(),
        audit,
        stderr,
    }
}

/// An origin that answers every request with a redirect to `location`.
async fn redirect_origin(location: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let resp = format!(
        "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let resp = resp.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(resp.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    port
}

fn call(tool: &str, args: Value) -> Value {
    json!({"tool": tool, "args": args})
}

/// A private temporary directory for one palisade process (its `TMPDIR`), so the cleanup
/// check sees only that process's socket directories: sibling tests in this binary run
/// their own gateways at the same time, and a scan of the shared /tmp would count their
/// live directories as left behind.
fn private_tmp(dir: &Path) -> PathBuf {
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    tmp
}

/// The process used `tmp` for its egress sockets (its log names the socket there), and
/// nothing of them is left in it. The first half keeps the second from passing vacuously.
fn assert_socket_dir_used_and_removed(tmp: &Path, log: &str) {
    let prefix = format!("{}/palisade-egress-", tmp.display());
    assert!(
        log.contains("egress proxy listening") && log.contains(&prefix),
        "the proxy's sockets were not created under {prefix}*: {log}"
    );
    let left: Vec<PathBuf> = std::fs::read_dir(tmp)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| palisade::gateway::network::is_socket_dir(p))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

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
        call(
            "net__http_get",
            json!({"address": format!("{allowed}/env"), "via": "env"})
        ),
        call(
            "net__http_get",
            json!({"address": format!("{allowed}/socks"), "via": "socks"})
        ),
        call(
            "net__http_get",
            json!({"address": format!("{denied}/env"), "via": "env"})
        ),
        call(
            "net__http_get",
            json!({"address": format!("{denied}/socks"), "via": "socks"})
        ),
        call("net__connect", json!({"host": "127.0.0.1", "port": port})),
        call(
            "net__http_get",
            json!({"address": format!("http://127.0.0.1:{port}/lit"), "via": "socks"})
        ),
        call("net__resolve", json!({"name": "allowed.test"})),
        call("net__udp", json!({"host": "192.0.2.1", "port": 53})),
        call(
            "net__http_get",
            json!({"address": format!("{other}/x"), "via": "env"})
        ),
        call(
            "other__http_get",
            json!({"address": format!("{other}/mine"), "via": "env"})
        ),
        call(
            "other__http_get",
            json!({"address": format!("{allowed}/theirs"), "via": "env"})
        ),
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

/// `palisade check` shows what would happen to an allowlisted server without socat.
#[test]
fn check_reports_the_network_gap() {
    if which::which("bwrap").is_err() {
        skip::skip("bwrap is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.json");
    std::fs::write(
        &cfg,
        json!({"mcpServers": {"net": {"command": "/bin/true", "sandbox": {"policy": "warn", "network": {"allowedDomains": ["example.com"]}}}}}).to_string(),
    )
    .unwrap();
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(which::which("bwrap").unwrap(), bin.path().join("bwrap")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["check", "--config"])
        .arg(&cfg)
        .env("PATH", bin.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("DEGRADED"), "{text}");
    assert!(text.contains("socat is not installed"), "{text}");
    // With socat on PATH the same server is fully sandboxed.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["check", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("net (warn): sandboxed"), "{text}");
}

/// `palisade check` on an allowlisted server under `backend: landlock`: sandboxed (no socat
/// needed), with the by-port limit said; with socat off PATH too, so it cannot be the
/// bubblewrap bridge that is counted.
#[test]
fn check_reports_an_allowlist_under_landlock_as_sandboxed_with_its_port_limit() {
    if landlock_abi_4().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.json");
    std::fs::write(
        &cfg,
        json!({"mcpServers": {"net": {"command": "/bin/true", "sandbox": {"backend": "landlock", "network": {"allowedDomains": ["example.com"]}}}}}).to_string(),
    )
    .unwrap();
    let empty = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["check", "--config"])
        .arg(&cfg)
        .env("PATH", empty.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("net (enforce): sandboxed (Landlock"),
        "{text}"
    );
    assert!(
        text.contains("network rules name ports, not addresses"),
        "{text}"
    );
}

/// `palisade run --allow-domain`: the command (real curl) reaches the allowed name through
/// the proxy `run` keeps alive, is refused the other, and `run` exits with curl's status and
/// leaves no socket directory behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_allow_domain_keeps_a_proxy_alive_and_propagates_the_exit_code() {
    if prerequisites().is_none() {
        return;
    }
    let Ok(curl) = which::which("curl") else {
        skip::skip("curl is not installed");
        return;
    };
    let origin = http_origin().await;
    let port = origin.port();
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 allowed.test denied.test\n").unwrap();
    let tmp = private_tmp(dir.path());
    let run = |url: String| {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_palisade"));
        c.env("TMPDIR", &tmp)
            .env("RUST_LOG", "info")
            .arg("run")
            .arg("--allow-domain")
            .arg(format!("allowed.test:{port}"))
            .arg("--egress-hosts-file")
            .arg(&hosts)
            .arg("--")
            .arg(&curl)
            .args(["-sS", "-f", "--max-time", "20"])
            .arg(url)
            .kill_on_drop(true);
        c
    };
    let first = run(format!("http://allowed.test:{port}/run"))
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(
        first.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(
        stdout,
        format!("origin saw [GET /run HTTP/1.1] host [allowed.test:{port}]")
    );

    let out_denied = run(format!("http://denied.test:{port}/run"))
        .output()
        .await
        .unwrap();
    // curl -f: 22 for an HTTP error (the proxy's 403), propagated by `run`.
    assert_eq!(
        out_denied.status.code(),
        Some(22),
        "{}",
        String::from_utf8_lossy(&out_denied.stderr)
    );
    assert!(String::from_utf8_lossy(&out_denied.stderr).contains("egress refused"));

    // Control: without --allow-domain the same command has no network at all (exit 6: the
    // name cannot be resolved), so the success above is the proxy's doing.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["run", "--"])
        .arg(&curl)
        .args(["-sS", "--max-time", "20"])
        .arg(format!("http://allowed.test:{port}/run"))
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(6),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    assert_socket_dir_used_and_removed(&tmp, &String::from_utf8_lossy(&first.stderr));
    assert_socket_dir_used_and_removed(&tmp, &String::from_utf8_lossy(&out_denied.stderr));
}

/// `backend: srt` through `palisade serve`: the server runs under the real srt (found through
/// `PALISADE_SRT`), recorded as such in the audit; srt's proxy refuses a name outside the
/// allowlist and the sandbox has no direct route. srt resolves names with the system
/// resolver and refuses loopback addresses, so the fake `allowed.test` cannot be reached on a
/// machine without internet: the allowed case is covered by the golden settings test only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srt_backend_runs_the_server_under_srt_with_the_lists() {
    let Some(python) = prerequisites() else {
        return;
    };
    let srt = deps().join("node_modules/.bin/srt");
    if !srt.exists() || which::which("rg").is_err() {
        skip::skip(&format!(
            "srt ({}) or ripgrep is not installed",
            srt.display()
        ));
        return;
    }
    let origin = http_origin().await;
    let port = origin.port();
    let dir = tempfile::tempdir().unwrap();
    let servers = json!({
        "net": {"command": python.display().to_string(), "args": [net_probe()],
                "sandbox": {"backend": "srt", "network": {"allowedDomains": ["allowed.test"]}}},
    });
    let calls = json!([
        call(
            "net__http_get",
            json!({"address": format!("http://denied.test:{port}/x"), "via": "env"})
        ),
        call("net__connect", json!({"host": "127.0.0.1", "port": port})),
        call("net__proxy_env", json!({})),
    ]);
    let srt_s = srt.display().to_string();
    let r = serve(
        dir.path(),
        &python,
        servers,
        json!({}),
        calls,
        &[("PALISADE_SRT", &srt_s)],
    )
    .await;
    assert!(
        r.tools.contains(&"net__http_get".to_string()),
        "{:?}\n{}",
        r.tools,
        r.stderr
    );
    let text = |i: usize| r.calls[i]["text"].as_str().unwrap().to_string();
    assert_eq!(r.calls[0]["error"], true, "{}", text(0));
    assert!(!text(0).contains("origin saw"), "{}", text(0));
    assert_eq!(r.calls[1]["error"], true, "{}", text(1));
    // srt's own proxy variables, not palisade's bridges.
    assert!(text(2).contains("HTTP_PROXY=http://"), "{}", text(2));
    assert!(!text(2).contains("127.0.0.1:3128"), "{}", text(2));
    assert!(
        r.audit
            .iter()
            .all(|a| a["sandboxBackend"] == "srt" && a["sandboxed"] == true),
        "{:#?}",
        r.audit
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

/// The Landlock ABI `palisade check` reports; `None` (with the reason printed) when it is
/// below 4, where TCP cannot be confined and the allowlist is refused (unit-tested).
fn landlock_abi_4() -> Option<u32> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["check", "--json"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    match report["machine"]["landlock"]["abi"].as_u64() {
        Some(abi) if abi >= 4 => Some(abi as u32),
        other => {
            skip::skip(&format!(
                "Landlock ABI 4 is needed for network rules; check says {other:?}"
            ));
            None
        }
    }
}

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
    if landlock_abi_4().is_none() {
        return;
    }
    let origin = http_origin().await;
    let port = origin.port();
    let dir = tempfile::tempdir().unwrap();
    let tmp = private_tmp(dir.path());
    let allowed = format!("http://allowed.test:{port}");
    let denied = format!("http://denied.test:{port}");
    let other = format!("http://other.test:{port}");
    let landlock = |domain: &str| {
        json!({"command": python.display().to_string(), "args": [net_probe()],
               "sandbox": {"backend": "landlock",
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
        call(
            "net__http_get",
            json!({"address": format!("{allowed}/env"), "via": "env"})
        ),
        call(
            "net__http_get",
            json!({"address": format!("{allowed}/socks"), "via": "socks"})
        ),
        call(
            "net__http_get",
            json!({"address": format!("{denied}/env"), "via": "env"})
        ),
        call(
            "net__http_get",
            json!({"address": format!("{denied}/socks"), "via": "socks"})
        ),
        call("net__connect", json!({"host": "127.0.0.1", "port": port})),
        call("net__udp", json!({"host": "127.0.0.1", "port": udp_port})),
        call(
            "other__http_get",
            json!({"address": format!("{allowed}/theirs"), "via": "env"})
        ),
        call(
            "other__http_get",
            json!({"address": format!("{other}/mine"), "via": "env"})
        ),
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
    // Around the proxy: another loopback port (Landlock), UDP (seccomp).
    let (err, text) = c(4);
    assert!(err && text.contains("connect:"), "{text}");
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
    assert_eq!(r.audit[6]["serverName"], "other");
    assert!(
        r.stderr
            .contains("TCP connect to the egress proxy's loopback port only"),
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
/// to another loopback port (the origin's) is refused by Landlock, UDP, `listen()` and a TCP
/// Fast Open connect by seccomp. Control: the same probe run directly connects, sends the
/// datagram (received here), listens and connects by Fast Open. The secret the server was
/// given appears nowhere in palisade's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_landlock_run_allows_only_the_proxy_port_and_the_proxy_only_its_secret() {
    if landlock_abi_4().is_none() {
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
        .args(["run", "--backend", "landlock", "--allow-domain"])
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
