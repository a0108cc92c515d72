//! The egress proxy's listeners: one unix socket per server, in a private directory, each
//! bound into that server's sandbox only. The socket a connection arrives on identifies the
//! server, so a server cannot use another's allowlist. A server without a network namespace
//! (the Landlock tier) also gets a loopback TCP port (`add_loopback`): the port identifies
//! the server, and only clients presenting its secret are served there (`loopback`). A
//! registry adds, updates and removes servers at runtime; removing one closes its socket
//! (and its port) and cuts its live connections.
//!
//! This module owns the sockets and the tasks; deciding is `policy`'s job and connecting is
//! `dial`'s. It must never accept on a socket whose file others than the owner can reach
//! (the directory must be private) and never leave a socket file behind.

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{broadcast, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::config::DomainLists;

use super::dial::ServerCtx;
use super::events::{EventBus, RefusalEvent};
use super::loopback::{LoopbackEndpoint, ProxySecret};
use super::policy::EgressPolicy;
use super::resolve::Resolver;
use super::{http, socks5, EgressError, Limits};

/// `sun_path` is 108 bytes including the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

/// How the proxy is built. The resolver is explicit so tests can pin names to loopback
/// origins without any global switch.
#[derive(Debug, Clone)]
pub struct EgressOptions {
    /// A private directory (mode 0700, created if missing) for the per-server sockets. Must
    /// not be visible inside any sandbox.
    pub socket_dir: PathBuf,
    pub resolver: Resolver,
    pub limits: Limits,
    /// Refusal events buffered per subscriber before the oldest are dropped.
    pub event_capacity: usize,
}

impl EgressOptions {
    /// Defaults: system resolver, default limits, 1024 buffered events.
    pub fn new(socket_dir: impl Into<PathBuf>) -> EgressOptions {
        EgressOptions {
            socket_dir: socket_dir.into(),
            resolver: Resolver::system(),
            limits: Limits::default(),
            event_capacity: 1024,
        }
    }

    pub fn with_resolver(mut self, resolver: Resolver) -> EgressOptions {
        self.resolver = resolver;
        self
    }

    pub fn with_limits(mut self, limits: Limits) -> EgressOptions {
        self.limits = limits;
        self
    }
}

/// One registered server.
struct Registered {
    socket: PathBuf,
    ctx: Arc<ServerCtx>,
    cancel: CancellationToken,
    /// Shared by the server's listeners: the connection limit is per server.
    slots: Arc<Semaphore>,
    loopback: Option<LoopbackEndpoint>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.cancel.cancel();
        // A single unlink of our own socket; nothing to report if it is already gone.
        let _ = std::fs::remove_file(&self.socket);
    }
}

struct Inner {
    options: EgressOptions,
    bus: EventBus,
    servers: Mutex<HashMap<String, Registered>>,
    next_id: AtomicU64,
}

/// The shared egress proxy. Cheap to clone; dropping the last clone closes every socket and
/// removes its file. Must be used inside a tokio runtime.
#[derive(Clone)]
pub struct EgressProxy {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EgressProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressProxy")
            .field("socket_dir", &self.inner.options.socket_dir)
            .field("servers", &self.servers())
            .finish()
    }
}

impl EgressProxy {
    /// Creates the proxy; no socket exists until [`EgressProxy::add_server`].
    pub fn new(options: EgressOptions) -> Result<EgressProxy, EgressError> {
        prepare_dir(&options.socket_dir)?;
        let bus = EventBus::new(options.event_capacity);
        Ok(EgressProxy {
            inner: Arc::new(Inner {
                options,
                bus,
                servers: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(0),
            }),
        })
    }

    /// Registers a server with its lists, binds its socket and starts accepting. Returns the
    /// socket's host path (bind it into the sandbox; see `wiring`).
    pub fn add_server(&self, name: &str, lists: &DomainLists) -> Result<PathBuf, EgressError> {
        let policy = EgressPolicy::from_lists(lists).map_err(|e| EgressError::Config {
            server: name.to_string(),
            cause: e,
        })?;
        let mut servers = self.lock();
        if servers.contains_key(name) {
            return Err(EgressError::Duplicate(name.to_string()));
        }
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let socket = self
            .inner
            .options
            .socket_dir
            .join(format!("{id}-{}.sock", file_stem(name)));
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(EgressError::PathTooLong(socket));
        }
        remove_stale_socket(&socket)?;
        let listener = UnixListener::bind(&socket).map_err(|e| EgressError::Io {
            what: format!("binding {}", socket.display()),
            cause: e,
        })?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).map_err(|e| {
            EgressError::Io {
                what: format!("restricting {}", socket.display()),
                cause: e,
            }
        })?;
        let ctx = Arc::new(ServerCtx {
            name: name.to_string(),
            policy: RwLock::new(Arc::new(policy)),
            resolver: self.inner.options.resolver.clone(),
            bus: self.inner.bus.clone(),
            limits: self.inner.options.limits.clone(),
        });
        let cancel = CancellationToken::new();
        let slots = Arc::new(Semaphore::new(ctx.limits.max_connections_per_server));
        tokio::spawn(accept_loop(
            Listener::Unix(listener),
            Arc::clone(&ctx),
            Arc::clone(&slots),
            cancel.clone(),
        ));
        tracing::info!(server = name, socket = %socket.display(), "egress proxy listening");
        servers.insert(
            name.to_string(),
            Registered {
                socket: socket.clone(),
                ctx,
                cancel,
                slots,
                loopback: None,
            },
        );
        Ok(socket)
    }

    /// Opens a registered server's loopback endpoint (127.0.0.1, an ephemeral port, a fresh
    /// secret), or returns the one it has. Connections there are served with the server's
    /// lists, like its socket's, once they present the secret; it closes with the socket.
    pub fn add_loopback(&self, name: &str) -> Result<LoopbackEndpoint, EgressError> {
        let mut servers = self.lock();
        let reg = servers
            .get_mut(name)
            .ok_or_else(|| EgressError::UnknownServer(name.to_string()))?;
        if let Some(ep) = &reg.loopback {
            return Ok(ep.clone());
        }
        let io = |what: &str| {
            let what = format!("{what} for server {name}");
            move |source| EgressError::Io {
                what,
                cause: source,
            }
        };
        let secret = ProxySecret::generate().map_err(io("cannot draw a proxy secret"))?;
        let std_listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .map_err(io("cannot open a loopback proxy port"))?;
        std_listener
            .set_nonblocking(true)
            .map_err(io("cannot make the loopback proxy port non-blocking"))?;
        let port = std_listener
            .local_addr()
            .map_err(io("cannot read the loopback proxy port"))?
            .port();
        let listener =
            TcpListener::from_std(std_listener).map_err(io("cannot serve the loopback port"))?;
        let ep = LoopbackEndpoint { port, secret };
        tokio::spawn(accept_loop(
            Listener::Tcp(listener, Arc::new(ep.secret.clone())),
            Arc::clone(&reg.ctx),
            Arc::clone(&reg.slots),
            reg.cancel.clone(),
        ));
        tracing::info!(
            server = name,
            port,
            "egress proxy listening on loopback (secret required)"
        );
        reg.loopback = Some(ep.clone());
        Ok(ep)
    }

    /// Replaces a server's lists; connections made from now on use the new ones.
    pub fn update_server(&self, name: &str, lists: &DomainLists) -> Result<(), EgressError> {
        let policy = EgressPolicy::from_lists(lists).map_err(|e| EgressError::Config {
            server: name.to_string(),
            cause: e,
        })?;
        let servers = self.lock();
        let reg = servers
            .get(name)
            .ok_or_else(|| EgressError::UnknownServer(name.to_string()))?;
        match reg.ctx.policy.write() {
            Ok(mut p) => *p = Arc::new(policy),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(policy),
        }
        Ok(())
    }

    /// Closes a server's socket, removes its file and cuts its live connections. Returns
    /// false if it was not registered.
    pub fn remove_server(&self, name: &str) -> bool {
        let removed = self.lock().remove(name);
        removed.is_some()
    }

    /// The host path of a registered server's socket.
    pub fn socket_path(&self, name: &str) -> Option<PathBuf> {
        self.lock().get(name).map(|r| r.socket.clone())
    }

    /// Registered server names, sorted.
    pub fn servers(&self) -> Vec<String> {
        let mut v: Vec<String> = self.lock().keys().cloned().collect();
        v.sort();
        v
    }

    /// The handle through which refusals made outside the proxy join its own.
    pub fn reporter(&self) -> super::events::RefusalReporter {
        super::events::RefusalReporter(self.inner.bus.clone())
    }

    /// Every refusal from now on, for every server.
    pub fn subscribe(&self) -> broadcast::Receiver<RefusalEvent> {
        self.inner.bus.subscribe()
    }

    /// Removes every server (sockets closed, files removed, connections cut).
    pub fn shutdown(&self) {
        let drained: Vec<Registered> = self.lock().drain().map(|(_, r)| r).collect();
        drop(drained);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Registered>> {
        // The map stays consistent even if a holder panicked: every operation on it is a
        // single insert/remove.
        self.inner
            .servers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A server's listener: its unix socket, or its loopback port with the secret it requires.
enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener, Arc<ProxySecret>),
}

/// An accepted connection, and the secret it must present (loopback only).
type Accepted = (Box<dyn Stream>, Option<Arc<ProxySecret>>);

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

impl Listener {
    async fn accept(&self) -> std::io::Result<Accepted> {
        match self {
            Listener::Unix(l) => {
                let (s, _) = l.accept().await?;
                Ok((Box::new(s), None))
            }
            Listener::Tcp(l, secret) => {
                let (s, _) = l.accept().await?;
                Ok((Box::new(s), Some(Arc::clone(secret))))
            }
        }
    }
}

async fn accept_loop(
    listener: Listener,
    ctx: Arc<ServerCtx>,
    slots: Arc<Semaphore>,
    cancel: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => break,
            a = listener.accept() => a,
        };
        let (stream, secret) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning.
                tracing::warn!(server = %ctx.name, error = %e, "egress accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::warn!(server = %ctx.name, limit = ctx.limits.max_connections_per_server,
                "egress connection limit reached; connection dropped");
            continue;
        };
        let ctx = Arc::clone(&ctx);
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = serve_connection(&ctx, stream, secret.as_deref()) => {}
            }
            drop(permit);
        });
    }
    tracing::debug!(server = %ctx.name, "egress listener closed");
}

/// Peeks at the first byte: 0x05 is a SOCKS5 greeting, anything else is read as HTTP.
/// `secret`: the credentials the client must present (loopback connections).
async fn serve_connection(ctx: &ServerCtx, stream: Box<dyn Stream>, secret: Option<&ProxySecret>) {
    let mut reader = BufReader::with_capacity(ctx.limits.max_head_bytes.max(512), stream);
    let first = match tokio::time::timeout(ctx.limits.handshake_timeout, reader.fill_buf()).await {
        Ok(Ok([])) | Ok(Err(_)) => return,
        Err(_) => {
            tracing::info!(server = %ctx.name, "egress: client sent nothing in time");
            return;
        }
        Ok(Ok(buf)) => buf[0],
    };
    if first == 5 {
        socks5::serve(ctx, reader, secret).await;
    } else {
        http::serve(ctx, reader, secret).await;
    }
}

/// Creates the socket directory (0700) or checks an existing one is a private directory
/// owned by us.
fn prepare_dir(dir: &Path) -> Result<(), EgressError> {
    let io = |what: &str| {
        let what = format!("{what} {}", dir.display());
        move |source| EgressError::Io {
            what,
            cause: source,
        }
    };
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::private_dir::create(dir).map_err(io("creating"))
        }
        Err(e) => Err(io("inspecting")(e)),
        Ok(meta) => {
            let me = nix::unistd::geteuid().as_raw();
            if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
                return Err(EgressError::UnsafeDir(dir.to_path_buf()));
            }
            Ok(())
        }
    }
}

fn remove_stale_socket(path: &Path) -> Result<(), EgressError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            std::fs::remove_file(path).map_err(|e| EgressError::Io {
                what: format!("removing stale {}", path.display()),
                cause: e,
            })
        }
        Ok(_) => Err(EgressError::Io {
            what: format!("{} exists and is not a socket", path.display()),
            cause: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        }),
        Err(_) => Ok(()),
    }
}

/// A file-name-safe, bounded form of a server name (the numeric prefix keeps names unique).
fn file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect()
}
