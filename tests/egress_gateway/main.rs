//! Network isolation end to end through `palisade serve`, driven by a real MCP client (the
//! Python `mcp` SDK): each server runs in real bubblewrap with its own empty network
//! namespace, reaches Palisade's egress proxy through real socat bridges, and gets exactly
//! its allowlist. Fake names (`allowed.test`, `denied.test`, `other.test`) resolve to a
//! loopback origin through the test-only `palisade.egressHostsFile` setting. Nothing here
//! leaves 127.0.0.1.
//!
//! Each "cannot" has a control: the same probe run by a server whose sandbox was degraded to
//! the host network (warn mode, no socat) succeeds, so the refusals are the sandbox's.
//!
//! One test binary, one module per subject: `bwrap` (servers in bubblewrap through `palisade
//! serve`, without socat, and one server reaching for another's egress socket), `commands`
//! (`palisade check` on the network, `palisade run --allow-domain`, the srt backend),
//! `landlock` (the Landlock tier's way out, through `serve` and `run`). The gateway they
//! start and the probes they share are here.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

#[path = "../egress_support/mod.rs"]
mod egress_support;
#[path = "../support/sdk_client.rs"]
mod sdk_client;
#[path = "../support/skip.rs"]
mod skip;

mod bwrap;
mod commands;
mod landlock;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use sdk_client::Outcome as Run;

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
    let mut s = json!({
        "sandboxDir": dir.join("sandbox").display().to_string(),
        "sandboxPolicy": "enforce",
        "egressHostsFile": hosts.display().to_string(),
        "auditLog": dir.join("audit.jsonl").display().to_string(),
        "policy": Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/allow-all-policy.json").display().to_string(),
    });
    for (k, v) in settings.as_object().unwrap() {
        s[k] = v.clone();
    }
    // Blocking, off the runtime: the origins these tests serve run on it.
    let (dir, python) = (dir.to_path_buf(), python.to_path_buf());
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || sdk_client::run(&python, &dir, &servers, &s, &calls, &env))
        .await
        .unwrap()
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

/// net_probe.py's `http_get`: `address` fetched through the proxy that `via` names (`env`:
/// the HTTP proxy variables; `socks`: SOCKS5).
fn http_get(tool: &str, address: &str, via: &str) -> Value {
    call(tool, json!({"address": address, "via": via}))
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

/// The Landlock ABI `palisade check` reports; `None` (with the reason printed) when it is
/// below 4, where TCP cannot be confined and the allowlist is refused (unit-tested).
fn landlock_abi_4() -> Option<u32> {
    match skip::landlock_abi() {
        Some(abi) if abi >= 4 => Some(abi as u32),
        other => {
            skip::skip(&format!(
                "Landlock ABI 4 is needed for network rules; check says {other:?}"
            ));
            None
        }
    }
}

/// `landlock_abi_4`, and palisade able to check each connect here (without that an
/// allowlist under Landlock is refused under enforce: unit-tested, and tried in `commands`
/// under a filter that takes the checks away). A host skip otherwise: the checks are a host
/// feature `palisade check` reports (`connect checks`).
fn landlock_allowlist(test: &str) -> Option<u32> {
    let abi = landlock_abi_4()?;
    if !skip::connect_checks_of(env!("CARGO_BIN_EXE_palisade").as_ref()) {
        skip::host_skip(test, "palisade check says connect checks: NO on this host");
        return None;
    }
    Some(abi)
}
