//! The launcher seam: how the supervisor gets a server to talk to. It asks a [`Launcher`] for
//! a [`Launched`] (the server's stdout to read, its stdin to write, what is enforced on it, and
//! a [`ServerProcess`] to wait on, stop and reap) and never needs to know which kind it got.
//!
//! - [`ProcessLauncher`], the only one production uses (`GatewayOptions::new` picks it, and
//!   the CLI never sets another): `spawn::spawn_with_faults`, a sandboxed child process.
//! - [`InProcessLauncher`], for tests: runs a server as a tokio task over two
//!   `tokio::io::duplex` pipes, so the call pipeline can be tested without processes. Its
//!   enforcement is `Enforcement::InProcess`: never sandboxed, and every record says so.
//!
//! Never: choose the launcher from a test switch (it is injected through `GatewayOptions`);
//! report an in-process server as sandboxed; leave a child unreaped or a task running after
//! its stop (a task is aborted where a process would be killed).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, DuplexStream};
use tokio::process::Child;
use tokio::task::JoinHandle;

use crate::gateway::busy_poll::BusyPoll;
use crate::gateway::server::fault::ProcessFaults;
use crate::gateway::server::spawn::{self, PreparedGuard, SpawnError};
use crate::sandbox::capabilities::{Capabilities, Depth};
use crate::sandbox::launch::{Enforcement, LaunchRequest};

/// Starts one server for the supervisor (every start and restart of a slot).
pub trait Launcher: Send + Sync + std::fmt::Debug + 'static {
    /// How much of the machine the gateway probes once before the first start (a full probe
    /// runs a trial sandbox; a launcher that never sandboxes needs less).
    fn probe_depth(&self) -> Depth {
        Depth::Full
    }

    /// Starts the server `req` describes; the server's output is charged to `faults`.
    fn launch(
        &self,
        req: &LaunchRequest,
        caps: &Capabilities,
        faults: Arc<ProcessFaults>,
    ) -> Result<Launched, SpawnError>;
}

/// A started server, as the supervisor uses it.
pub struct Launched {
    /// What the server writes (its MCP messages).
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
    /// What the server reads.
    pub stdin: Box<dyn AsyncWrite + Send + Unpin>,
    pub enforcement: Enforcement,
    pub faults: Arc<ProcessFaults>,
    pub process: ServerProcess,
}

/// How a server ended.
#[derive(Debug)]
pub enum Exit {
    /// A child process's exit status.
    Status(std::process::ExitStatus),
    /// An in-process server's task ended (returned, panicked or was aborted).
    Task(String),
    /// Waiting failed.
    Unknown(String),
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Status(s) => write!(f, "{s}"),
            Exit::Task(t) => write!(f, "in-process task {t}"),
            Exit::Unknown(e) => write!(f, "waiting for the server failed: {e}"),
        }
    }
}

/// What runs the server: a sandboxed child (with what its launch attached) or a task.
#[derive(Debug)]
pub enum ServerProcess {
    Child {
        child: Child,
        /// Kept alive as long as the child: it may own resources the sandbox uses.
        guard: Box<PreparedGuard>,
    },
    Task {
        /// `None` once the task's end has been seen (a `JoinHandle` is polled to its end once).
        handle: Option<JoinHandle<()>>,
        ended: Option<String>,
    },
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // The backstop a child has in `kill_on_drop`: a task outlives no supervisor.
        match self {
            ServerProcess::Task {
                handle: Some(h), ..
            } => h.abort(),
            // `kill_on_drop` ends the server itself; its group (Landlock) goes with it.
            ServerProcess::Child { child, guard } if guard.own_group() => {
                signal_group(child.id(), nix::sys::signal::Signal::SIGKILL);
            }
            _ => {}
        }
    }
}

/// Sends `sig` to the process group the server `pid` leads (the Landlock tier's servers, see
/// `PreparedGuard::own_group`). Called while the leader is unreaped, or right after reaping
/// it: a group's number is not reused while any member lives, so it reaches the server's
/// tree only (with no member left, at worst a new group that took the number in between:
/// the kernel hands PIDs out in order and wraps only after `pid_max`).
fn signal_group(pid: Option<u32>, sig: nix::sys::signal::Signal) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()).filter(|p| *p > 1) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), sig);
    }
}

impl ServerProcess {
    /// Waits until the server ends. Cancel-safe; may be called again after it returned.
    pub async fn wait(&mut self) -> Exit {
        match self {
            ServerProcess::Child { child, guard } => {
                let pid = child.id();
                let exit = match child.wait().await {
                    Ok(s) => Exit::Status(s),
                    Err(e) => Exit::Unknown(e.to_string()),
                };
                if guard.own_group() {
                    // The server ended; what it started must not outlive it (no PID
                    // namespace does it for this tier).
                    signal_group(pid, nix::sys::signal::Signal::SIGKILL);
                }
                // Its cgroup empties a moment later; waited for here, not in a drop.
                guard.settled().await;
                exit
            }
            ServerProcess::Task { handle, ended } => {
                if let Some(h) = handle.as_mut() {
                    let how = match h.await {
                        Ok(()) => "returned".to_string(),
                        Err(e) if e.is_cancelled() => "aborted".to_string(),
                        Err(e) => format!("panicked ({e})"),
                    };
                    *handle = None;
                    *ended = Some(how);
                }
                Exit::Task(ended.clone().unwrap_or_else(|| "ended".into()))
            }
        }
    }

    /// Asks the server to stop (SIGTERM to a child; a task is aborted). False when there was
    /// nothing to ask (a child already reaped).
    pub fn terminate(&mut self) -> bool {
        match self {
            ServerProcess::Child { child, guard } => match child.id() {
                Some(pid) if guard.own_group() => {
                    signal_group(Some(pid), nix::sys::signal::Signal::SIGTERM);
                    true
                }
                Some(pid) => {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGTERM,
                    );
                    true
                }
                None => false,
            },
            ServerProcess::Task { handle, .. } => {
                if let Some(h) = handle {
                    h.abort();
                }
                handle.is_some()
            }
        }
    }

    /// Kills the server and reaps it (SIGKILL and wait for a child; abort and await a task).
    pub async fn kill(&mut self) -> std::io::Result<()> {
        match self {
            ServerProcess::Child { child, guard } => {
                if guard.own_group() {
                    signal_group(child.id(), nix::sys::signal::Signal::SIGKILL);
                }
                let killed = child.kill().await;
                guard.settled().await;
                killed
            }
            ServerProcess::Task { handle, .. } => {
                if let Some(h) = handle {
                    h.abort();
                }
                self.wait().await;
                Ok(())
            }
        }
    }

    /// The resource limits the server's process tree ran into (cgroup), for restart reasons.
    pub fn limits_hit(&self) -> Vec<String> {
        match self {
            ServerProcess::Child { guard, .. } => guard.limits_hit(),
            ServerProcess::Task { .. } => Vec::new(),
        }
    }

    /// Set once a fork was refused at the task limit, or the tree holds more tasks than its
    /// limit where nothing else holds it (see `PreparedGuard`).
    pub fn over_task_limit(&self) -> Option<String> {
        match self {
            ServerProcess::Child { child, guard } => guard
                .task_limit_hit()
                .or_else(|| child.id().and_then(|pid| guard.tasks_over_limit(pid))),
            ServerProcess::Task { .. } => None,
        }
    }
}

/// The production launcher: a child process, sandboxed as its launch request says.
#[derive(Default, Clone)]
pub struct ProcessLauncher {
    /// Watches each server's stdout while the gateway's thread would sleep (`serve` on
    /// stdio; `crate::gateway::busy_poll`).
    watcher: Option<Arc<BusyPoll>>,
}

impl ProcessLauncher {
    /// A launcher whose servers' stdouts `watcher` watches.
    pub fn watched_by(watcher: Arc<BusyPoll>) -> ProcessLauncher {
        ProcessLauncher {
            watcher: Some(watcher),
        }
    }
}

impl std::fmt::Debug for ProcessLauncher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProcessLauncher")
    }
}

impl Launcher for ProcessLauncher {
    fn launch(
        &self,
        req: &LaunchRequest,
        caps: &Capabilities,
        faults: Arc<ProcessFaults>,
    ) -> Result<Launched, SpawnError> {
        let s = spawn::spawn_with_faults(req, caps, faults)?;
        crate::gateway::busy_poll::watch_with(self.watcher.as_deref(), &s.stdout);
        Ok(Launched {
            stdout: Box::new(s.stdout),
            stdin: Box::new(s.stdin),
            enforcement: s.enforcement,
            faults: s.faults,
            process: ServerProcess::Child {
                child: s.child,
                guard: Box::new(s.prepared_guard),
            },
        })
    }
}

/// The pipes an in-process server speaks over: it reads `stdin` and writes `stdout`
/// (newline-delimited JSON-RPC, as a process would). Dropping `stdout` is its EOF.
#[derive(Debug)]
pub struct InProcessPipes {
    /// The server's name in the config.
    pub name: String,
    pub stdin: DuplexStream,
    pub stdout: DuplexStream,
}

/// Runs one in-process server until its stdin ends.
pub type ServeInProcess =
    Arc<dyn Fn(InProcessPipes) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The test launcher: every server of the config runs as a tokio task (`serve` is given its
/// name, to pick a behaviour), over in-memory pipes. Not a sandbox: its enforcement is
/// `Enforcement::InProcess`, and nothing in the config's `command` is run.
#[derive(Clone)]
pub struct InProcessLauncher {
    serve: ServeInProcess,
}

/// Bytes each in-process pipe buffers before its writer waits (as a pipe would).
const PIPE_BUFFER: usize = 64 * 1024;

impl InProcessLauncher {
    pub fn new(serve: ServeInProcess) -> InProcessLauncher {
        InProcessLauncher { serve }
    }
}

impl std::fmt::Debug for InProcessLauncher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InProcessLauncher")
    }
}

impl Launcher for InProcessLauncher {
    fn probe_depth(&self) -> Depth {
        Depth::Quick
    }

    fn launch(
        &self,
        req: &LaunchRequest,
        _caps: &Capabilities,
        faults: Arc<ProcessFaults>,
    ) -> Result<Launched, SpawnError> {
        let (to_server, server_stdin) = tokio::io::duplex(PIPE_BUFFER);
        let (server_stdout, from_server) = tokio::io::duplex(PIPE_BUFFER);
        // No stderr: its tail is at its end at once.
        faults.stderr_closed();
        let task = tokio::spawn((self.serve)(InProcessPipes {
            name: req.name.clone(),
            stdin: server_stdin,
            stdout: server_stdout,
        }));
        Ok(Launched {
            stdout: Box::new(from_server),
            stdin: Box::new(to_server),
            enforcement: Enforcement::InProcess,
            faults,
            process: ServerProcess::Task {
                handle: Some(task),
                ended: None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    fn echo_lines() -> ServeInProcess {
        Arc::new(|pipes: InProcessPipes| {
            Box::pin(async move {
                let mut lines = tokio::io::BufReader::new(pipes.stdin).lines();
                let mut out = pipes.stdout;
                while let Ok(Some(line)) = lines.next_line().await {
                    let _ = out
                        .write_all(format!("{}:{line}\n", pipes.name).as_bytes())
                        .await;
                }
            })
        })
    }

    fn request(name: &str) -> LaunchRequest {
        LaunchRequest {
            name: name.into(),
            ..LaunchRequest::default()
        }
    }

    fn caps() -> Capabilities {
        crate::sandbox::capabilities::probe_for(
            Depth::Quick,
            crate::sandbox::capabilities::SrtProbe::Locate,
        )
    }

    #[tokio::test]
    async fn an_in_process_server_speaks_over_its_pipes_ends_at_stdin_eof_and_is_not_sandboxed() {
        let launcher = InProcessLauncher::new(echo_lines());
        let faults = Arc::new(ProcessFaults::new("t", 1 << 20));
        let mut l = launcher.launch(&request("t"), &caps(), faults).unwrap();
        assert_eq!(l.enforcement, Enforcement::InProcess);
        assert!(!l.enforcement.is_sandboxed());
        l.stdin.write_all(b"hi\n").await.unwrap();
        let mut got = String::new();
        tokio::io::BufReader::new(&mut l.stdout)
            .read_line(&mut got)
            .await
            .unwrap();
        assert_eq!(got, "t:hi\n");
        l.stdin.shutdown().await.unwrap();
        assert_eq!(
            l.process.wait().await.to_string(),
            "in-process task returned"
        );
        // Waiting again answers the same, without polling the finished task.
        assert_eq!(
            l.process.wait().await.to_string(),
            "in-process task returned"
        );
    }

    #[tokio::test]
    async fn killing_an_in_process_server_aborts_its_task() {
        let never = Arc::new(|_pipes: InProcessPipes| {
            Box::pin(std::future::pending::<()>()) as Pin<Box<dyn Future<Output = ()> + Send>>
        });
        let launcher = InProcessLauncher::new(never);
        let faults = Arc::new(ProcessFaults::new("t", 1 << 20));
        let mut l = launcher.launch(&request("t"), &caps(), faults).unwrap();
        l.process.kill().await.unwrap();
        assert_eq!(
            l.process.wait().await.to_string(),
            "in-process task aborted"
        );
        assert!(!l.process.terminate(), "nothing left to stop");
    }

    // Paused time: the runtime advances the clock only when nothing else can run, so the
    // timeout below fires only if the dropped task was never aborted (not a timed assertion).
    #[tokio::test(start_paused = true)]
    async fn dropping_an_in_process_server_aborts_its_task() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let tx = Arc::new(std::sync::Mutex::new(Some(tx)));
        // The task holds the sender until it ends: the receiver hears when it is dropped.
        let hold = Arc::new(move |_pipes: InProcessPipes| {
            let tx = tx.lock().unwrap().take();
            Box::pin(async move {
                let _tx = tx;
                std::future::pending::<()>().await
            }) as Pin<Box<dyn Future<Output = ()> + Send>>
        });
        let launcher = InProcessLauncher::new(hold);
        let faults = Arc::new(ProcessFaults::new("t", 1 << 20));
        let l = launcher.launch(&request("t"), &caps(), faults).unwrap();
        drop(l);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(3600), rx).await;
        assert!(
            matches!(ended, Ok(Err(_))),
            "the task outlived its handle: {ended:?}"
        );
    }
}
