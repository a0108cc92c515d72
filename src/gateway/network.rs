//! The gateway's side of network isolation: one shared egress proxy (`crate::egress`) for
//! every server with `sandbox.network.allowedDomains`, created at start in a private 0700
//! temporary directory (removed at shutdown), one socket per server put into its
//! `LaunchRequest` (and, for a server under the Landlock tier, a loopback endpoint with a
//! secret); and the attribution of refusals to the call in flight.
//!
//! Attribution: the pipeline subscribes to the proxy's refusal events just before it
//! forwards a call and drains the events of that server once the answer is back. The proxy
//! publishes a refusal before it answers the refused client (`egress::dial`), so a refusal
//! that made the call fail is always seen. Two calls in flight on the same server at once
//! both see the refusals of that window (the socket identifies the server, not the call).
//! Never: start a proxy when no server needs one, or leave a socket or directory behind.

use std::path::Path;

use tokio::sync::broadcast;

use super::NotStarted;
use crate::config::{NetworkConfig, Settings};
use crate::egress::{EgressError, EgressOptions, EgressProxy, RefusalEvent, Resolver};
use crate::sandbox::capabilities::Capabilities;
use crate::sandbox::launch::{needs_loopback_endpoint, EgressSocket, LaunchRequest};

/// The proxy and the private directory holding its sockets.
pub struct GatewayEgress {
    pub proxy: EgressProxy,
    // Dropped after the proxy's sockets are removed (see `shutdown`).
    dir: Option<tempfile::TempDir>,
}

impl GatewayEgress {
    /// The private directory holding every server's socket.
    pub fn socket_dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(|d| d.path())
    }

    /// Closes every socket, cuts live connections, removes the directory.
    pub fn shutdown(&mut self) {
        self.proxy.shutdown();
        if let Some(dir) = self.dir.take() {
            if let Err(e) = dir.close() {
                tracing::warn!("cannot remove the egress socket directory: {e}");
            }
        }
    }
}

impl Drop for GatewayEgress {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// True when the request may be served by palisade's proxy: sandboxed, with an allowlist.
/// An srt server gets a socket too (unused while srt runs it with its own proxy; it is what
/// keeps the allowlist enforced when warn mode falls back to the native sandbox because srt
/// is missing). An opted-out server gets the host network.
pub fn wants_proxy(req: &LaunchRequest) -> bool {
    req.sandboxed && matches!(req.network, NetworkConfig::Allowlist(_))
}

/// Starts the proxy when some request wants it and registers each such server. A request
/// whose lists are invalid becomes an error (the server is refused, whatever the sandbox
/// policy: a typo must not widen anything); a proxy that cannot start or bind marks the
/// request `EgressSocket::Failed` and `resolve` decides (enforce refuses, warn shares the
/// host network).
pub fn attach(
    requests: &mut [(String, Result<LaunchRequest, NotStarted>)],
    settings: &Settings,
    caps: &Capabilities,
) -> Option<GatewayEgress> {
    if !requests
        .iter()
        .any(|(_, r)| r.as_ref().is_ok_and(wants_proxy))
    {
        return None;
    }
    let started = start_proxy(settings);
    let egress = match started {
        Ok(e) => e,
        Err(why) => {
            tracing::error!("egress proxy not started: {why}");
            for (_, r) in requests.iter_mut() {
                if let Ok(req) = r {
                    if wants_proxy(req) {
                        req.egress = EgressSocket::Failed(why.to_string());
                    }
                }
            }
            return None;
        }
    };
    for (name, r) in requests.iter_mut() {
        let Ok(req) = r else { continue };
        // Every server's sandbox hides the socket directory, should a grant (a read of
        // /tmp, or srt's open reads) show it: same uid inside and out, so its mode 0700
        // would not stop a server from connecting to another server's socket.
        if let Some(dir) = egress.socket_dir() {
            req.deny_read.push(dir.to_path_buf());
        }
        if !wants_proxy(req) {
            continue;
        }
        let NetworkConfig::Allowlist(lists) = &req.network else {
            continue;
        };
        match egress.proxy.add_server(name, lists) {
            Ok(socket) => req.egress = EgressSocket::Ready(socket),
            Err(e @ EgressError::Config { .. }) => *r = Err(NotStarted::Egress(e)),
            Err(e) => {
                tracing::error!(server = %name, "egress socket not created: {e}");
                req.egress = EgressSocket::Failed(e.to_string());
            }
        }
        if let Ok(req) = r {
            open_loopback(&egress.proxy, name, req, caps);
        }
    }
    Some(egress)
}

/// Opens the proxy's loopback endpoint for a server registered with it that runs under the
/// Landlock tier (`needs_loopback_endpoint`); a failure marks its egress failed, for
/// `resolve` to decide (enforce refuses, warn shares the host network).
pub fn open_loopback(
    proxy: &EgressProxy,
    name: &str,
    req: &mut LaunchRequest,
    caps: &Capabilities,
) {
    if !matches!(req.egress, EgressSocket::Ready(_)) || !needs_loopback_endpoint(req, caps) {
        return;
    }
    match proxy.add_loopback(name) {
        Ok(ep) => {
            req.egress_loopback = Some(ep);
            req.egress_refusals = Some(proxy.reporter());
        }
        Err(e) => {
            tracing::error!(server = %name, "egress loopback endpoint not opened: {e}");
            req.egress = EgressSocket::Failed(e.to_string());
        }
    }
}

/// Why the shared egress proxy did not start.
#[derive(Debug, thiserror::Error)]
pub enum EgressStartError {
    #[error(transparent)]
    HostsFile(#[from] crate::egress::hosts::HostsError),
    #[error("cannot create a private socket directory: {0}")]
    SocketDir(std::io::Error),
    #[error("cannot make {} private: {cause}", dir.display())]
    Private {
        dir: std::path::PathBuf,
        cause: std::io::Error,
    },
    #[error(transparent)]
    Proxy(#[from] EgressError),
}

fn start_proxy(settings: &Settings) -> Result<GatewayEgress, EgressStartError> {
    let resolver = match &settings.egress_hosts_file {
        None => Resolver::system(),
        Some(path) => {
            let (r, n) = crate::egress::hosts::resolver_from_file(path)?;
            tracing::warn!(
                file = %path.display(),
                "egressHostsFile pins {n} names for the egress proxy (a test knob: these names \
                 skip the system resolver and the address-class rule)"
            );
            r
        }
    };
    start_in_temp(resolver)
}

/// A proxy whose sockets live in a fresh private directory under the system temp dir.
pub fn start_in_temp(resolver: Resolver) -> Result<GatewayEgress, EgressStartError> {
    let dir = tempfile::Builder::new()
        .prefix("palisade-egress-")
        .tempdir()
        .map_err(EgressStartError::SocketDir)?;
    // tempfile creates directories with the umask's mode (0755 here); the proxy insists on
    // a private directory.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).map_err(
        |source| EgressStartError::Private {
            dir: dir.path().to_path_buf(),
            cause: source,
        },
    )?;
    let proxy = EgressProxy::new(EgressOptions::new(dir.path()).with_resolver(resolver))?;
    Ok(GatewayEgress {
        proxy,
        dir: Some(dir),
    })
}

/// The refusals for `server` in the receiver, in order, one per host and port.
pub fn drain(rx: &mut broadcast::Receiver<RefusalEvent>, server: &str) -> Vec<RefusalEvent> {
    let mut out: Vec<RefusalEvent> = Vec::new();
    loop {
        match rx.try_recv() {
            Ok(ev) => {
                if ev.server == server
                    && !out.iter().any(|o| o.host == ev.host && o.port == ev.port)
                {
                    out.push(ev);
                }
            }
            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                tracing::warn!(server, "missed {n} egress refusal events (see the log)");
            }
            Err(_) => break,
        }
    }
    out
}

/// The text the agent reads for a call's refusals: one `[SANDBOX BLOCKED] network access to
/// HOST:PORT denied ...` line per refused host, each with the config entry that would allow
/// it where one would (none allows a direct connect around the proxy).
pub fn refusal_text(refusals: &[RefusalEvent]) -> String {
    refusals
        .iter()
        .map(RefusalEvent::message)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `path` is inside a directory this module created (for tests of cleanup).
pub fn is_socket_dir(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("palisade-egress-"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DomainLists;
    use crate::egress::{Protocol, RefusalReason};

    fn quick_caps() -> Capabilities {
        crate::sandbox::capabilities::probe(crate::sandbox::capabilities::Depth::Quick)
    }

    fn req(name: &str, allowed: &[&str]) -> (String, Result<LaunchRequest, NotStarted>) {
        (
            name.to_string(),
            Ok(LaunchRequest {
                name: name.into(),
                command: "x".into(),
                network: NetworkConfig::Allowlist(DomainLists {
                    allowed_domains: allowed.iter().map(|s| s.to_string()).collect(),
                    denied_domains: vec![],
                }),
                ..LaunchRequest::default()
            }),
        )
    }

    #[tokio::test]
    async fn one_socket_per_allowlisted_server_bad_lists_refused_dir_removed() {
        let mut reqs = vec![
            req("a", &["example.com"]),
            req("bad", &["https://example.com/path"]),
            (
                "none".into(),
                Ok(LaunchRequest {
                    name: "none".into(),
                    ..LaunchRequest::default()
                }),
            ),
        ];
        let mut egress =
            attach(&mut reqs, &Settings::default(), &quick_caps()).expect("a proxy is needed");
        let EgressSocket::Ready(sock) = &reqs[0].1.as_ref().unwrap().egress else {
            panic!("{:?}", reqs[0].1)
        };
        assert!(sock.exists());
        let dir = sock.parent().unwrap().to_path_buf();
        assert!(is_socket_dir(&dir));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let bad = reqs[1].1.as_ref().unwrap_err();
        assert!(
            matches!(bad, NotStarted::Egress(EgressError::Config { .. })),
            "{bad:?}"
        );
        assert!(bad.to_string().contains("server bad"), "{bad}");
        assert_eq!(reqs[2].1.as_ref().unwrap().egress, EgressSocket::NotStarted);
        egress.shutdown();
        assert!(!dir.exists(), "socket directory removed");
    }

    #[test]
    fn no_allowlist_no_proxy() {
        let mut reqs = vec![(
            "none".to_string(),
            Ok(LaunchRequest {
                name: "none".into(),
                ..LaunchRequest::default()
            }),
        )];
        assert!(attach(&mut reqs, &Settings::default(), &quick_caps()).is_none());
    }

    #[tokio::test]
    async fn an_unreadable_hosts_file_fails_the_proxy_not_the_gateway() {
        let mut reqs = vec![req("a", &["example.com"])];
        let settings = Settings {
            egress_hosts_file: Some("/nonexistent/hosts".into()),
            ..Settings::default()
        };
        assert!(attach(&mut reqs, &settings, &quick_caps()).is_none());
        let EgressSocket::Failed(why) = &reqs[0].1.as_ref().unwrap().egress else {
            panic!()
        };
        assert!(why.contains("/nonexistent/hosts"), "{why}");
    }

    #[test]
    fn refusals_are_filtered_by_server_and_deduplicated() {
        let (tx, mut rx) = broadcast::channel(16);
        let ev = |server: &str, host: &str| RefusalEvent {
            server: server.into(),
            host: host.into(),
            port: 80,
            protocol: Protocol::HttpForward,
            reason: RefusalReason::NotAllowed,
            hint: Some(format!("add \"{host}\" to sandbox.network.allowedDomains")),
        };
        for e in [
            ev("a", "x.test"),
            ev("b", "y.test"),
            ev("a", "x.test"),
            ev("a", "z.test"),
        ] {
            tx.send(e).unwrap();
        }
        let got = drain(&mut rx, "a");
        assert_eq!(
            got.iter().map(|e| e.host.as_str()).collect::<Vec<_>>(),
            ["x.test", "z.test"]
        );
        let text = refusal_text(&got);
        assert!(
            text.starts_with("[SANDBOX BLOCKED] network access to x.test:80 denied"),
            "{text}"
        );
        assert!(text.contains("add \"z.test\""), "{text}");
    }
}
