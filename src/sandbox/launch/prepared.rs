//! What a launch hands back: the command ready to spawn (`Prepared`, which owns everything
//! the child needs to outlive: descriptors, scratch directories, the cgroup), the record of
//! what is enforced (`Enforcement`), and why a launch cannot happen (`LaunchError`).
//!
//! Holds, never decides: nothing here probes the machine or chooses a tier. Never: drop a
//! descriptor, scratch directory or cgroup the child still needs (they go when this value is
//! dropped, so the caller keeps it until the child is reaped).

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use super::scratch::Scratch;
use crate::config::Backend;
use crate::sandbox::cgroup::Cgroup;
use crate::sandbox::closure;
use crate::sandbox::sys;

/// What is actually enforced for a launched process: logged, shown by `check`, audited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "status")]
pub enum Enforcement {
    /// Fully contained by the named backend.
    Sandboxed { backend: Backend },
    /// Running with less containment than configured (warn mode); the reasons say what is
    /// missing and how to fix it.
    Degraded {
        backend: Option<Backend>,
        reasons: Vec<String>,
    },
    /// The user opted this server out of the sandbox.
    OptedOut,
    /// Not a process at all: a test server run as a task inside the gateway
    /// (`gateway::server::launcher::InProcessLauncher`). Never a sandbox, never in production.
    InProcess,
}

impl Enforcement {
    /// True only when the process really runs in a sandbox with nothing degraded.
    pub fn is_sandboxed(&self) -> bool {
        matches!(self, Enforcement::Sandboxed { .. })
    }
}

/// Why a launch cannot happen.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// enforce mode and the machine cannot contain the command.
    #[error("refusing to run `{name}` unsandboxed (sandbox policy is enforce): {}", reasons.join("; "))]
    Refused { name: String, reasons: Vec<String> },
    /// Bad request: missing command, bad grant, ... The message names the fix.
    #[error("{0}")]
    Invalid(String),
    /// The command cannot be found or run.
    #[error(transparent)]
    Command(#[from] closure::ClosureError),
    #[error("{context}: {cause}")]
    Io {
        context: String,
        cause: std::io::Error,
    },
}

/// A command ready to spawn. Keep it alive until the child is spawned: it owns the
/// descriptor of the seccomp program the child inherits.
#[derive(Debug)]
pub struct Prepared {
    pub command: tokio::process::Command,
    pub enforcement: Enforcement,
    /// The full argument vector (program first), for logs, `check` and tests.
    pub argv: Vec<OsString>,
    /// Descriptors the child must inherit; closed when this is dropped.
    pub(super) held: Vec<OwnedFd>,
    /// Private files the child reads (srt's settings); removed when this is dropped.
    pub(crate) files: Vec<tempfile::TempPath>,
    /// The server's cgroup (memory and task limits), removed when this is dropped: keep it
    /// until the child is reaped.
    pub(super) cgroup: Option<Cgroup>,
    /// The task limit the supervisor must enforce itself by counting (see
    /// `task_count`): set where neither a cgroup nor RLIMIT_NPROC holds it (root, no pids
    /// cgroup).
    pub(super) task_watch: Option<u64>,
    /// The Landlock tier's private HOME and TMPDIR, removed when this is dropped: keep it
    /// until the child is reaped.
    pub(super) scratch: Option<Scratch>,
    /// The same command ready for `sys::spawn` (see `spawn_unforked`), where the tier made it.
    pub(super) unforked: Option<Unforked>,
}

/// A command prepared for `sys::spawn`: its strings, and the child's steps (the same ones
/// `command` runs in its pre-exec hook).
#[derive(Debug)]
pub(super) struct Unforked {
    pub(super) exec: sys::Exec,
    pub(super) child: Arc<sys::LandlockChild>,
}

/// How long `Prepared::settled` waits for the kernel to empty a reaped server's cgroup, and
/// how often it looks.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_millis(200);
const SETTLE_STEP: std::time::Duration = std::time::Duration::from_millis(5);

impl Prepared {
    /// Waits, without blocking the runtime, until the reaped child's cgroup holds no process
    /// (the kernel ends a PID namespace's processes a moment after its init): the cgroup is
    /// then removed at once when this is dropped, instead of by the drop's blocking retries.
    /// Bounded by `SETTLE_WAIT`; returns at once without a cgroup.
    pub async fn settled(&self) {
        let Some(cgroup) = &self.cgroup else {
            return;
        };
        let deadline = tokio::time::Instant::now() + SETTLE_WAIT;
        while !cgroup.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(SETTLE_STEP).await;
        }
    }

    /// Which cgroup limits the child's process tree ran into (for the restart reason).
    pub fn limits_hit(&self) -> Vec<String> {
        self.cgroup
            .as_ref()
            .map(|c| c.limits_hit())
            .unwrap_or_default()
    }

    /// The task limit's text once the tree had a fork refused at it (see
    /// `Cgroup::task_limit_hit`).
    pub fn task_limit_hit(&self) -> Option<String> {
        self.cgroup.as_ref().and_then(|c| c.task_limit_hit())
    }

    /// Where no cgroup nor rlimit bounds the tasks (see `task_watch`): the task limit's
    /// text once the tree rooted at `pid` (the spawned child) holds more tasks than it.
    /// The bwrap processes outside the sandbox's own are not the server's: two are allowed
    /// for them.
    pub fn tasks_over_limit(&self, pid: u32) -> Option<String> {
        let limit = self.task_watch?;
        let count = crate::sandbox::task_count::count_tasks(pid, limit + 3)?;
        (count > limit + 2).then(|| {
            format!(
                "process limit reached ({limit} processes, sandbox.limits.processes): over \
                 {limit} tasks counted, no cgroup"
            )
        })
    }

    /// Gives up the command for `exec` (`palisade run`); the descriptors it needs stay open
    /// in this process until the exec replaces it.
    pub fn into_std(self) -> (std::process::Command, Enforcement, Vec<OwnedFd>) {
        // `files` would be removed here: exec'ing srt needs its settings file to outlive
        // this process, which `run` does not do for srt (it spawns a child instead).
        (self.command.into_std(), self.enforcement, self.held)
    }

    pub(crate) fn new_with_files(
        command: tokio::process::Command,
        enforcement: Enforcement,
        argv: Vec<OsString>,
        files: Vec<tempfile::TempPath>,
    ) -> Prepared {
        Prepared {
            command,
            enforcement,
            argv,
            held: Vec::new(),
            files,
            // srt applies no palisade limits (docs/network.md lists what srt does not do).
            cgroup: None,
            task_watch: None,
            scratch: None,
            unforked: None,
        }
    }

    /// Starts the command without copying this process's memory (`sys::spawn`: the child
    /// shares it, this thread paused until the child has exec'd), with the signal mask
    /// `mask`, where the tier prepared it for that (Landlock); `None` where the caller must
    /// spawn `command` instead. The child does exactly what `command` would. Returns the
    /// child's pid, or why it could not start (the child then already reaped).
    pub fn spawn_unforked(&self, mask: &libc::sigset_t) -> Option<std::io::Result<u32>> {
        let u = self.unforked.as_ref()?;
        let child = &u.child;
        let hook = move || child.apply();
        Some(sys::spawn(&u.exec, &hook, mask).map(|pid| pid.unsigned_abs()))
    }

    /// True when the child reads files this value owns (it must outlive the child, so
    /// the caller spawns and waits instead of exec'ing).
    pub fn owns_files(&self) -> bool {
        !self.files.is_empty() || self.scratch.is_some()
    }
}

/// An I/O failure with what was being done.
pub(super) fn io(context: &str, source: std::io::Error) -> LaunchError {
    LaunchError::Io {
        context: context.to_string(),
        cause: source,
    }
}

/// The argument vector shown for a command: `program`, then `args`.
pub(super) fn argv_of<A: Into<OsString>>(
    program: &Path,
    args: impl IntoIterator<Item = A>,
) -> Vec<OsString> {
    let mut argv = vec![program.as_os_str().to_os_string()];
    argv.extend(args.into_iter().map(Into::into));
    argv
}
