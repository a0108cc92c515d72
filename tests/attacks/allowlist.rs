//! The network allowlist rows of the serve table: a third server with an allowlist tries
//! names its list does not permit (through a colluding peer's proxy, a listener, ...), beside
//! a positive row that must reach the allowed name on every tier that can enforce one here.

use std::collections::BTreeMap;
use std::time::Duration;

use palisade::client::McpClient;
use serde_json::json;

use crate::scene::*;

/// The network allowlist, tried by a third server, `allowlisted` (the same hostile program),
/// whose allowlist names only `allowed.test` on the test's loopback origin, beside the peer,
/// whose list names only `other.test` (the same origin). `egressHostsFile` maps the names to
/// 127.0.0.1. Each attack's goal is the origin answering a request that allowlist does not
/// permit; launched directly there is no proxy and the request goes straight to the origin
/// (the control: the origin answers it). `egress_allowed` is the positive row: the allowed
/// name through the proxy must work on every tier, so the rows cannot pass by everything
/// being closed. The peer hands its proxy URL (port and, under Landlock, secret) to
/// `allowlisted` through their shared writable root: a colluding pair.
pub(crate) const ALLOWLIST_ATTACKS: &[(&str, &str)] = &[
    ("egress_allowed", "allowlist: reach the allowed name through the proxy (positive row: must work)"),
    ("egress_direct_tcp", "allowlist: GET from the allowed origin's port on the host's 127.0.0.1 directly, not through the proxy"),
    ("egress_denied_http", "allowlist: a name not in the allowlist through the HTTP proxy"),
    ("egress_denied_socks", "allowlist: a name not in the allowlist through the SOCKS5 proxy"),
    ("egress_peer_port_no_secret", "allowlist: another server's allowed name through that server's proxy endpoint, without a secret"),
    ("egress_peer_port_peer_secret", "allowlist: another server's allowed name through that server's proxy endpoint with its secret (handed over)"),
    ("egress_own_port_peer_secret", "allowlist: another server's allowed name through this server's proxy endpoint with the other server's secret"),
    ("egress_udp", "allowlist: UDP round trip with an echo server on the host's 127.0.0.1"),
    ("egress_listen", "allowlist: listen() on a TCP port, then a host process connects to it (checked on the host)"),
    ("egress_proxy_port_elsewhere", "allowlist: a listener at this server's proxy port number on another address (127.0.0.2), not the proxy"),
    ("egress_fastopen", "allowlist: GET from the origin's port by a TCP Fast Open connect (sendto with MSG_FASTOPEN)"),
];

/// The allowlist row that must succeed everywhere.
pub(crate) const POSITIVE: &str = "egress_allowed";

/// Why `tier` cannot run the allowlist rows here, if it cannot: srt's own proxy resolves
/// names itself (the test's names need palisade's `egressHostsFile`), bubblewrap's bridge
/// needs socat, Landlock's network rules need ABI 4 and palisade's connect checks (without
/// them enforce refuses the allowlisted servers).
pub(crate) fn allowlist_unsupported(tier: &str) -> Option<String> {
    match tier {
        // Measured: with the rows enabled, srt's proxy answers 502 for the allowed name.
        "srt" => Some("srt's own proxy cannot resolve the test's names".into()),
        "bwrap" if which::which("socat").is_err() => Some("socat is not installed".into()),
        "landlock" => match crate::skip::landlock_abi_of(palisade_bin().as_ref()) {
            Some(abi) if abi >= 4 => (!crate::skip::connect_checks_of(palisade_bin().as_ref()))
                .then(|| "palisade cannot check connects here (connect_mediation)".into()),
            abi => Some(format!("Landlock ABI {abi:?}: network rules need 4")),
        },
        _ => None,
    }
}

/// The allowlist rows: the peer hands over its proxy URL first; the listener is tried from
/// the host while the server still runs.
pub(crate) async fn run_allowlist(
    c: &McpClient,
    peer: &str,
    allowlisted: &str,
) -> BTreeMap<String, (bool, String)> {
    let mut out = BTreeMap::new();
    let (leaked, detail) = call(c, &format!("{peer}leak_proxy"), json!({})).await;
    assert!(leaked, "the peer hands over its proxy URL: {detail}");
    for (name, _) in ALLOWLIST_ATTACKS {
        let _listener = if *name == "egress_proxy_port_elsewhere" {
            Some(listen_elsewhere(c, allowlisted).await)
        } else {
            None
        };
        let r = call(c, &format!("{allowlisted}{name}"), json!({})).await;
        let r = if *name == "egress_listen" {
            host_connects(&r.1)
        } else {
            r
        };
        out.insert(name.to_string(), r);
    }
    out
}

/// A host listener on 127.0.0.2 at the allowlisted server's proxy port number (the
/// origin's port for the direct control, which has no proxy), greeting whoever connects
/// until the returned guard is dropped.
async fn listen_elsewhere(c: &McpClient, allowlisted: &str) -> Greeter {
    let (ok, detail) = call(c, &format!("{allowlisted}proxy_port"), json!({})).await;
    let port: u16 = detail
        .parse()
        .unwrap_or_else(|_| panic!("the server names its proxy port: {ok} {detail}"));
    let listener = std::net::TcpListener::bind(("127.0.0.2", port))
        .unwrap_or_else(|e| panic!("host listener on 127.0.0.2:{port}: {e}"));
    listener.set_nonblocking(true).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let thread = std::thread::spawn(move || {
        use std::io::Write;
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            match listener.accept() {
                Ok((mut s, _)) => {
                    let _ = s.write_all(b"elsewhere listener\n");
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    Greeter {
        stop,
        thread: Some(thread),
    }
}

/// Stops and joins the host listener of `listen_elsewhere`.
struct Greeter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Greeter {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Decided on the host: whether a host process reaches the listener the tool reported
/// ("listening on 127.0.0.1:PORT") and is greeted by it.
pub(crate) fn host_connects(detail: &str) -> (bool, String) {
    use std::io::Read;
    let Some(port) = detail
        .strip_prefix("listening on 127.0.0.1:")
        .and_then(|p| p.parse::<u16>().ok())
    else {
        return (false, format!("{detail} (host: no listener to try)"));
    };
    let shown = detail.replace(&port.to_string(), "PORT");
    match std::net::TcpStream::connect(("127.0.0.1", port)) {
        Err(e) => (false, format!("{shown} (host: {e})")),
        Ok(mut s) => {
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut greeting = String::new();
            let _ = s.read_to_string(&mut greeting);
            let greeted = greeting.contains("hostile listener");
            let seen = if greeted {
                "connected, greeted by the listener"
            } else {
                "connected to another listener"
            };
            (greeted, format!("{shown} (host: {seen})"))
        }
    }
}
