//! A small MCP client on rmcp: spawn a command as an MCP server (or connect any transport),
//! call it with a timeout on every request, shut it down and reap it.
//!
//! Used by `demo` (to drive `palisade serve` like an agent would) and by the hidden
//! `bench-client` (latency and throughput). It sits outside the gateway's flow: it is the
//! upstream side, never a part of the policy path. It must never leave a child running: every
//! exit path goes through `shutdown` (stdin closed, wait, SIGTERM, wait, SIGKILL), with
//! `kill_on_drop` as the backstop when a caller forgets.
// Roots are deprecated by SEP-2577, yet they are what real clients and servers use.
#![allow(deprecated)]

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientInfo, ErrorData,
    Implementation, InitializeRequestParams, ListRootsResult, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResult, Root, Tool,
};
use rmcp::service::{Peer, RequestContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;

/// Default time allowed for any one request, the handshake included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Grace periods of the shutdown sequence.
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// Where the child's stderr goes.
#[derive(Debug, Clone, Default)]
pub enum StderrMode {
    #[default]
    Inherit,
    Null,
    /// Appended to this file (the demo keeps the gateway's log to show it on failure).
    File(PathBuf),
}

/// How to start the server and what the client declares.
#[derive(Debug, Clone)]
pub struct SpawnOptions {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// Extra environment for the child (on top of the inherited one).
    pub env: Vec<(OsString, OsString)>,
    pub stderr: StderrMode,
    /// Per-request timeout (initialize included).
    pub timeout: Duration,
    /// `Some`: declare the roots capability and answer `roots/list` with these URIs.
    pub roots: Option<Vec<String>>,
}

impl SpawnOptions {
    pub fn new(program: impl Into<OsString>) -> Self {
        SpawnOptions {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            stderr: StderrMode::Inherit,
            timeout: DEFAULT_TIMEOUT,
            roots: None,
        }
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }
}

/// What went wrong talking to a server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot start {program}: {cause}")]
    Spawn {
        program: String,
        cause: std::io::Error,
    },
    #[error("{what} timed out after {timeout:?}")]
    Timeout { what: String, timeout: Duration },
    #[error("MCP handshake failed: {0}")]
    Initialize(String),
    #[error("{what} failed: {message}")]
    Request { what: String, message: String },
}

/// The client side handler: declares roots when asked to and answers `roots/list`.
#[derive(Clone)]
pub struct ClientState {
    roots: Option<Arc<RwLock<Vec<String>>>>,
}

impl ClientHandler for ClientState {
    fn get_info(&self) -> ClientInfo {
        let caps = match self.roots {
            Some(_) => ClientCapabilities::builder()
                .enable_roots()
                .enable_roots_list_changed()
                .build(),
            None => ClientCapabilities::default(),
        };
        // 2025-11-25: the newest revision in which servers may still ask for roots.
        InitializeRequestParams::new(
            caps,
            Implementation::new("palisade-client", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let uris = match &self.roots {
            Some(r) => match r.read() {
                Ok(g) => g.clone(),
                Err(p) => p.into_inner().clone(),
            },
            None => Vec::new(),
        };
        Ok(ListRootsResult::new(
            uris.into_iter().map(Root::new).collect(),
        ))
    }
}

/// A connected MCP client, optionally owning the server process.
pub struct McpClient {
    service: RunningService<RoleClient, ClientState>,
    child: Option<tokio::process::Child>,
    timeout: Duration,
    roots: Option<Arc<RwLock<Vec<String>>>>,
}

impl McpClient {
    /// Spawns `opts.program` and completes the MCP handshake within `opts.timeout`.
    pub async fn spawn(opts: SpawnOptions) -> Result<Self, ClientError> {
        let mut cmd = tokio::process::Command::new(&opts.program);
        cmd.args(&opts.args)
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        match &opts.stderr {
            StderrMode::Inherit => cmd.stderr(Stdio::inherit()),
            StderrMode::Null => cmd.stderr(Stdio::null()),
            StderrMode::File(p) => {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|source| ClientError::Spawn {
                        program: p.display().to_string(),
                        cause: source,
                    })?;
                cmd.stderr(Stdio::from(f))
            }
        };
        let program = opts.program.to_string_lossy().into_owned();
        let mut child = cmd.spawn().map_err(|source| ClientError::Spawn {
            program: program.clone(),
            cause: source,
        })?;
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            reap(child).await;
            return Err(ClientError::Initialize(
                "child has no piped stdio".to_string(),
            ));
        };
        match Self::connect((stdout, stdin), opts.timeout, opts.roots).await {
            Ok(mut c) => {
                c.child = Some(child);
                Ok(c)
            }
            Err(e) => {
                reap(child).await;
                Err(e)
            }
        }
    }

    /// Runs the handshake over any transport (e.g. `tokio::io::duplex` in tests).
    pub async fn connect<T, E, A>(
        transport: T,
        timeout: Duration,
        roots: Option<Vec<String>>,
    ) -> Result<Self, ClientError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let roots = roots.map(|r| Arc::new(RwLock::new(r)));
        let state = ClientState {
            roots: roots.clone(),
        };
        let service = match tokio::time::timeout(timeout, state.serve(transport)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(ClientError::Initialize(e.to_string())),
            Err(_) => {
                return Err(ClientError::Timeout {
                    what: "initialize".into(),
                    timeout,
                })
            }
        };
        Ok(McpClient {
            service,
            child: None,
            timeout,
            roots,
        })
    }

    /// The rmcp peer, for requests this helper does not wrap.
    pub fn peer(&self) -> &Peer<RoleClient> {
        self.service.peer()
    }

    /// The server's `initialize` answer.
    pub fn server_info(&self) -> Option<rmcp::model::ServerPeerInfo> {
        self.service.peer().peer_info().map(|i| (*i).clone())
    }

    async fn timed<T, F>(&self, what: &str, fut: F) -> Result<T, ClientError>
    where
        F: std::future::Future<Output = Result<T, rmcp::ServiceError>>,
    {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ClientError::Request {
                what: what.to_string(),
                message: e.to_string(),
            }),
            Err(_) => Err(ClientError::Timeout {
                what: what.to_string(),
                timeout: self.timeout,
            }),
        }
    }

    pub async fn list_tools(&self) -> Result<Vec<Tool>, ClientError> {
        self.timed("tools/list", self.service.peer().list_all_tools())
            .await
    }

    /// Calls a tool; `args` must be a JSON object (or null for none).
    pub async fn call_tool(&self, name: &str, args: Value) -> Result<CallToolResult, ClientError> {
        call_tool_on(self.service.peer(), self.timeout, name, args).await
    }

    pub async fn read_resource(&self, uri: &str) -> Result<ReadResourceResult, ClientError> {
        self.timed(
            "resources/read",
            self.service
                .peer()
                .read_resource(ReadResourceRequestParams::new(uri)),
        )
        .await
    }

    /// Replaces the roots this client announces and sends `roots/list_changed`.
    pub async fn set_roots(&self, uris: Vec<String>) -> Result<(), ClientError> {
        let Some(r) = &self.roots else {
            return Err(ClientError::Request {
                what: "set_roots".into(),
                message: "this client was started without the roots capability".into(),
            });
        };
        match r.write() {
            Ok(mut g) => *g = uris,
            Err(p) => *p.into_inner() = uris,
        }
        self.timed(
            "notifications/roots/list_changed",
            self.service.peer().notify_roots_list_changed(),
        )
        .await
    }

    /// Closes the session, then reaps the child: stdin closed, 3 s, SIGTERM, 3 s, SIGKILL.
    pub async fn shutdown(self) -> Option<ExitStatus> {
        let McpClient { service, child, .. } = self;
        // Cancelling drops the transport, which closes the child's stdin.
        let _ = tokio::time::timeout(EXIT_GRACE, service.cancel()).await;
        match child {
            Some(c) => reap(c).await,
            None => None,
        }
    }
}

/// `tools/call` on any client peer with a timeout (shared with concurrent bench workers).
pub async fn call_tool_on(
    peer: &Peer<RoleClient>,
    timeout: Duration,
    name: &str,
    args: Value,
) -> Result<CallToolResult, ClientError> {
    let mut params = CallToolRequestParams::new(name.to_string());
    match args {
        Value::Object(map) => params = params.with_arguments(map),
        Value::Null => {}
        other => {
            return Err(ClientError::Request {
                what: format!("tools/call {name}"),
                message: format!("arguments must be a JSON object, got {other}"),
            })
        }
    }
    match tokio::time::timeout(timeout, peer.call_tool(params)).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(ClientError::Request {
            what: format!("tools/call {name}"),
            message: e.to_string(),
        }),
        Err(_) => Err(ClientError::Timeout {
            what: format!("tools/call {name}"),
            timeout,
        }),
    }
}

/// Waits for a child that was asked to stop; escalates to SIGTERM then SIGKILL.
async fn reap(mut child: tokio::process::Child) -> Option<ExitStatus> {
    drop(child.stdin.take());
    if let Ok(Ok(st)) = tokio::time::timeout(EXIT_GRACE, child.wait()).await {
        return Some(st);
    }
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
        if let Ok(Ok(st)) = tokio::time::timeout(EXIT_GRACE, child.wait()).await {
            return Some(st);
        }
    }
    let _ = child.kill().await;
    child.wait().await.ok()
}

/// The text of every text block of a tool result, joined by newlines.
pub fn result_text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}
