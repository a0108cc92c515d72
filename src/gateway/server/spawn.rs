//! From a configured server to a running child process: the `LaunchRequest` (pure), the
//! launcher's `prepare` (sandbox resolution, owned by `crate::sandbox::launch`), and the spawn
//! itself with piped stdio.
//!
//! The gateway spawns `Prepared.command` itself so that it owns the `Child` (to reap it) and
//! the stderr pipe (read on its own task, capped, into the log with the server's name).
//! Never: inherit palisade's stdout (the MCP channel) or environment into a child.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use tokio::io::AsyncBufReadExt;

use crate::gateway::server::fault::ProcessFaults;
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::config::{Backend, NetworkConfig, SandboxSetting, ServerConfig, Settings};
use crate::roots::canon::{self, Base};
use crate::sandbox::launch::{self, Enforcement, Grant, LaunchError, LaunchRequest, Prepared};
use crate::sandbox::Access;
use crate::sandbox::ResourceLimits;

/// Bytes of a child's stderr copied into the log before the rest is discarded (per start).
pub const STDERR_CAP: usize = 256 * 1024;
/// Bytes of one stderr line shown in the log (the rest of the line is counted, not kept).
const STDERR_LINE: usize = 4096;

/// Why a grant path in the config cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("server `{server}`: sandbox.filesystem path `{raw}`: {cause}")]
pub struct GrantError {
    pub server: String,
    pub raw: String,
    pub cause: canon::PathError,
}

/// Builds the launch request for one server. Pure apart from canonicalising grant paths.
///
/// Grants, in order: the session sandbox dir (rw, always first: it is the server's first
/// root), `allowWrite` (rw), `allowRead` (ro). The gateway replaces them at every launch with
/// the server's current root set (`Slot::launch_request`), which also holds the policy's
/// roots; these grants are what a server gets without a policy.
pub fn launch_request(
    name: &str,
    server: &ServerConfig,
    settings: &Settings,
    sandbox_dir: &Path,
    home: Option<&Path>,
) -> Result<LaunchRequest, GrantError> {
    let base = Base {
        cwd: server.cwd.as_deref(),
        home,
    };
    let canon = |raw: &str| {
        canon::canonicalize(raw, &base).map_err(|source| GrantError {
            server: name.to_string(),
            raw: raw.to_string(),
            cause: source,
        })
    };
    let mut grants = vec![Grant {
        path: sandbox_dir.to_path_buf(),
        access: Access::Rw,
    }];
    let mut deny_read = Vec::new();
    let mut deny_write = Vec::new();
    let mut network = NetworkConfig::None;
    let mut policy = settings.sandbox_policy.unwrap_or_default();
    let mut backend = settings.backend.unwrap_or_default();
    let mut profile = None;
    let mut limits = ResourceLimits::default();
    let mut write_protect = true;
    let sandboxed = match &server.sandbox {
        SandboxSetting::Disabled => false,
        SandboxSetting::Enabled(sb) => {
            for raw in &sb.filesystem.allow_write {
                grants.push(Grant {
                    path: canon(raw)?,
                    access: Access::Rw,
                });
            }
            for raw in &sb.filesystem.allow_read {
                grants.push(Grant {
                    path: canon(raw)?,
                    access: Access::Ro,
                });
            }
            for raw in &sb.filesystem.deny_read {
                deny_read.push(canon(raw)?);
            }
            for raw in &sb.filesystem.deny_write {
                deny_write.push(canon(raw)?);
            }
            network = sb.network.clone();
            policy = sb.policy.unwrap_or(policy);
            backend = sb.backend.unwrap_or(backend);
            profile = sb.profile.clone();
            write_protect = sb.filesystem.protect_dangerous_files.unwrap_or(true);
            if let Some(l) = &sb.limits {
                limits = ResourceLimits::from_config(l);
            }
            true
        }
    };
    Ok(LaunchRequest {
        name: name.to_string(),
        command: server.command.clone(),
        args: server.args.clone(),
        env: server.env.clone(),
        cwd: server.cwd.clone(),
        grants,
        deny_read,
        deny_write,
        network,
        sandboxed,
        policy,
        backend,
        profile,
        profiles_dir: settings.profiles_dir.clone(),
        state_root: settings.state_dir.clone(),
        trace_log: None,
        // A config cannot grant `/` or a home directory read-write: `palisade run
        // --allow-broad` is the only way, and it is for one interactive command.
        allow_broad: false,
        limits,
        // The gateway fills this in when it registers the server with its egress proxy.
        egress: launch::EgressSocket::NotStarted,
        egress_loopback: None,
        egress_refusals: None,
        write_protect,
        session_dir: Some(sandbox_dir.to_path_buf()),
        allowlist_by_port: false,
        grants_canonical: false,
    })
}

/// A spawned server: its process and the two pipes rmcp speaks over.
#[derive(Debug)]
pub struct Spawned {
    pub child: Child,
    pub stdout: ChildStdout,
    pub stdin: ChildStdin,
    pub enforcement: Enforcement,
    /// What the stderr reader charges (and the tap should charge too).
    pub faults: Arc<ProcessFaults>,
    /// Kept alive as long as the child: it may own resources the sandbox uses.
    pub prepared_guard: PreparedGuard,
}

/// Owns whatever the launcher attached to `Prepared` besides the command.
#[derive(Debug)]
pub struct PreparedGuard(Prepared, bool);

impl PreparedGuard {
    /// The server leads a process group of its own (the Landlock tier: no PID namespace to
    /// end its children with it), which stopping it signals whole.
    pub fn own_group(&self) -> bool {
        self.1
    }

    /// The resource limits the server's process tree ran into (cgroup), for restart reasons.
    pub fn limits_hit(&self) -> Vec<String> {
        self.0.limits_hit()
    }

    /// Once the server is reaped: waits until its cgroup is empty (`Prepared::settled`).
    pub async fn settled(&self) {
        self.0.settled().await;
    }

    /// Set once a fork was refused at the cgroup's task limit.
    pub fn task_limit_hit(&self) -> Option<String> {
        self.0.task_limit_hit()
    }

    /// Set once the tree rooted at `pid` holds more tasks than its limit, where no cgroup
    /// or rlimit holds it (root without a pids cgroup).
    pub fn tasks_over_limit(&self, pid: u32) -> Option<String> {
        self.0.tasks_over_limit(pid)
    }
}

/// Why a server could not be spawned.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error("cannot start `{command}`: {cause}")]
    Spawn {
        command: String,
        cause: std::io::Error,
    },
    #[error("the child's {0} pipe was not created")]
    Pipe(&'static str),
}

/// Prepares and spawns the server against the machine's capabilities (probed once by the
/// caller); stderr goes to the log on its own task (with the default output-rate budget,
/// which nobody watches: for one-off runs such as `annotate`).
pub fn spawn(
    req: &LaunchRequest,
    caps: &crate::sandbox::capabilities::Capabilities,
) -> Result<Spawned, SpawnError> {
    let faults = Arc::new(ProcessFaults::new(
        &req.name,
        crate::gateway::server::fault::DEFAULT_OUTPUT_BYTES_PER_SECOND,
    ));
    spawn_with_faults(req, caps, faults)
}

/// As [`spawn`]; the stderr reader charges `faults` (the supervisor's, which kills the server
/// when it writes over its output-rate limit).
pub fn spawn_with_faults(
    req: &LaunchRequest,
    caps: &crate::sandbox::capabilities::Capabilities,
    faults: Arc<ProcessFaults>,
) -> Result<Spawned, SpawnError> {
    let mut prepared = launch::prepare_with(req, caps)?;
    let enforcement = prepared.enforcement.clone();
    // Under Landlock nothing ends the server's own children with it (no PID namespace): it
    // leads a process group of its own, so the supervisor's SIGTERM and SIGKILL reach them
    // too (src/gateway/server/launcher.rs). Its stdio are pipes: no terminal to lose.
    let own_group = matches!(
        enforcement,
        Enforcement::Sandboxed {
            backend: Backend::Landlock
        } | Enforcement::Degraded {
            backend: Some(Backend::Landlock),
            ..
        }
    );
    if own_group {
        prepared.command.process_group(0);
    }
    let mut child = prepared
        .command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| SpawnError::Spawn {
            command: req.command.clone(),
            cause: source,
        })?;
    let stdout = child.stdout.take().ok_or(SpawnError::Pipe("stdout"))?;
    let stdin = child.stdin.take().ok_or(SpawnError::Pipe("stdin"))?;
    // Results come back through stdout; requests are small.
    if crate::gateway::pipe_size::servers() {
        crate::gateway::pipe_size::widen(&stdout, "server stdout");
    }
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(log_stderr(req.name.clone(), stderr, faults.clone()));
    }
    Ok(Spawned {
        child,
        stdout,
        stdin,
        enforcement,
        faults,
        prepared_guard: PreparedGuard(prepared, own_group),
    })
}

/// Copies the child's stderr into the log, line by line (each shown up to `STDERR_LINE`
/// bytes), up to `STDERR_CAP` bytes; then keeps draining (so the child never blocks on a
/// full pipe) without logging. Reads in chunks and never holds more than one chunk and one
/// shown line, however long a line is. Every byte is charged to the output-rate budget;
/// over it, reading stops (the supervisor kills the server).
async fn log_stderr(
    server: String,
    stderr: tokio::process::ChildStderr,
    faults: Arc<ProcessFaults>,
) {
    let mut reader = tokio::io::BufReader::with_capacity(64 * 1024, stderr);
    let mut shown: Vec<u8> = Vec::new();
    let mut line_len = 0usize;
    let mut logged = 0usize;
    let mut said_cap = false;
    let mut emit = |shown: &mut Vec<u8>, line_len: usize, logged: &mut usize| {
        faults.note_stderr(&String::from_utf8_lossy(shown));
        if *logged < STDERR_CAP {
            *logged += line_len + 1;
            let text = String::from_utf8_lossy(shown);
            if line_len > shown.len() {
                tracing::info!(server = %server, "stderr: {text} [... {line_len} bytes in all]");
            } else {
                tracing::info!(server = %server, "stderr: {text}");
            }
        } else if !said_cap {
            said_cap = true;
            tracing::warn!(server = %server, "stderr: more than {STDERR_CAP} bytes; the rest is discarded");
        }
        shown.clear();
    };
    loop {
        let chunk = match reader.fill_buf().await {
            Ok([]) => break,
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(server = %server, "stderr unreadable ({e}); stopped");
                break;
            }
        };
        let len = chunk.len();
        let mut rest = chunk;
        while !rest.is_empty() {
            let (part, ends) = match memchr::memchr(b'\n', rest) {
                Some(i) => (&rest[..i], Some(i + 1)),
                None => (rest, None),
            };
            let room = STDERR_LINE.saturating_sub(shown.len());
            shown.extend_from_slice(&part[..part.len().min(room)]);
            line_len += part.len();
            match ends {
                Some(next) => {
                    emit(&mut shown, line_len, &mut logged);
                    line_len = 0;
                    rest = &rest[next..];
                }
                None => rest = &[],
            }
        }
        reader.consume(len);
        if !faults.charge(len) {
            faults.stderr_closed();
            return;
        }
    }
    if line_len > 0 {
        emit(&mut shown, line_len, &mut logged);
    }
    faults.stderr_closed();
}

/// RFC 8089 `file://` URI for an absolute path, percent-encoding what a URI path cannot hold.
pub fn file_uri(path: &Path) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
    // Everything but unreserved characters, `/` and a few sub-delims safe in a path.
    const PATH: &AsciiSet = &CONTROLS
        .add(b' ')
        .add(b'"')
        .add(b'#')
        .add(b'%')
        .add(b'<')
        .add(b'>')
        .add(b'?')
        .add(b'[')
        .add(b']')
        .add(b'\\')
        .add(b'^')
        .add(b'`')
        .add(b'{')
        .add(b'|')
        .add(b'}');
    format!(
        "file://{}",
        utf8_percent_encode(&path.to_string_lossy(), PATH)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_str, SandboxPolicy};
    use std::path::PathBuf;

    #[test]
    fn grants_are_sandbox_dir_then_write_then_read_and_policy_overrides() {
        let tmp = tempfile::tempdir().unwrap();
        let w = tmp.path().join("w");
        let r = tmp.path().join("r");
        let text = format!(
            r#"{{"mcpServers": {{"a": {{"command": "x", "sandbox": {{
                "filesystem": {{"allowWrite": ["{}"], "allowRead": ["{}"], "denyRead": ["~/.ssh"]}},
                "policy": "warn"}}}},
              "b": {{"command": "y", "sandbox": false}}}},
              "palisade": {{"sandboxPolicy": "enforce"}}}}"#,
            w.display(),
            r.display()
        );
        let cfg = parse_str(&text, "t.json").unwrap();
        let sd = tmp.path().join("sb");
        let home = Path::new("/home/u");
        let a = launch_request("a", &cfg.servers[0].1, &cfg.settings, &sd, Some(home)).unwrap();
        let got: Vec<_> = a
            .grants
            .iter()
            .map(|g| (g.path.clone(), g.access))
            .collect();
        assert_eq!(
            got,
            [(sd.clone(), Access::Rw), (w, Access::Rw), (r, Access::Ro)]
        );
        assert_eq!(a.deny_read, [PathBuf::from("/home/u/.ssh")]);
        assert_eq!(a.policy, SandboxPolicy::Warn);
        assert!(a.sandboxed);
        let b = launch_request("b", &cfg.servers[1].1, &cfg.settings, &sd, Some(home)).unwrap();
        assert!(!b.sandboxed);
        assert_eq!(b.policy, SandboxPolicy::Enforce);
        assert_eq!(
            b.grants.len(),
            1,
            "the sandbox dir is granted even when opted out"
        );
    }

    #[test]
    fn file_uris_percent_encode_spaces_and_hashes() {
        assert_eq!(file_uri(Path::new("/tmp/a b/#x")), "file:///tmp/a%20b/%23x");
    }
}
