//! The only part of `sandbox` that starts processes. The gateway and `palisade run` both
//! call `prepare`, which resolves enforce/warn against the machine, builds the spec, renders
//! it, and returns a command ready to spawn plus the record of what is enforced.
//!
//! Order of work: validate the request (grants, cwd, command) without starting anything,
//! resolve enforce/warn against the machine, then either render the bwrap sandbox or, in warn
//! mode or for an opted-out server, build a direct command. Every command built here starts
//! from an empty environment and inherits no descriptor but stdio (and the seccomp program,
//! which bwrap reads and closes).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::{Backend, NetworkConfig, SandboxPolicy};
use crate::profiles;
use crate::sandbox::bwrap::{self, Mask, Render};
use crate::sandbox::capabilities::{self, Capabilities, Depth};
use crate::sandbox::closure::{self, Lookup};
use crate::sandbox::resolve::{self, Needs, Plan, Resolution};
use crate::sandbox::{base, seccomp, sys};
use crate::sandbox::{Access, Mount, MountOrigin, NetworkSpec, ResourceLimits, SandboxSpec};

/// A directory a server may operate in, with its access.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Grant {
    pub path: PathBuf,
    pub access: Access,
}

/// Everything needed to launch one server (or one `palisade run` command).
#[derive(Debug, Clone)]
pub struct LaunchRequest {
    /// Server name, for logs, errors and per-server state.
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    /// Environment given by the user/config; nothing else of palisade's is inherited.
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// Roots and other grants (bind mounts at the same path).
    pub grants: Vec<Grant>,
    /// Paths never readable even under a grant.
    pub deny_read: Vec<PathBuf>,
    /// Paths never writable, nor creatable, even under a read-write grant: srt renders them
    /// as `denyWrite`; the native sandbox re-binds them read-only (`sandbox::deny_write`).
    pub deny_write: Vec<PathBuf>,
    pub network: NetworkConfig,
    /// `false` when the user opted this server out (`"sandbox": false`).
    pub sandboxed: bool,
    pub policy: SandboxPolicy,
    pub backend: Backend,
    pub profile: Option<String>,
    /// Directory of profiles overriding the built-in ones (`palisade.profilesDir`).
    pub profiles_dir: Option<PathBuf>,
    /// Where per-server state directories live (`<state_root>/<name>`); default
    /// `$HOME/.local/state/palisade/servers`. Only created for profiles that keep state.
    pub state_root: Option<PathBuf>,
    /// Run bwrap under `strace -f` writing this log (`palisade run --trace-denials`).
    pub trace_log: Option<PathBuf>,
    /// Permit read-write grants of `/` or a home directory (and read-only grants of `/`).
    pub allow_broad: bool,
    /// Resource limits for the process tree.
    pub limits: ResourceLimits,
    /// The egress proxy's socket for this server (only meaningful with an allowlist).
    pub egress: EgressSocket,
    /// Re-bind `WRITE_PROTECTED` paths found in read-write grants read-only (default on;
    /// `sandbox.filesystem.protectDangerousFiles: false` turns it off).
    pub write_protect: bool,
    /// The session sandbox dir when it is among the grants: a profile's `rootsAs` delivers it
    /// after the server's own roots and never as its only root (see
    /// `profiles::apply::roots_delivery`). `None` for `palisade run`, whose grants are all
    /// the command's own.
    pub session_dir: Option<PathBuf>,
}

/// Where a server with a domain allowlist reaches the egress proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum EgressSocket {
    /// No proxy was asked for yet. `check` resolves with this (it starts nothing); `prepare`
    /// treats it as a proxy that is not running.
    #[default]
    NotStarted,
    /// The host path of this server's socket (`EgressProxy::add_server`).
    Ready(PathBuf),
    /// The proxy could not serve this server; why.
    Failed(String),
}

impl Default for LaunchRequest {
    /// An empty request with the restrictive defaults; callers fill in name and command.
    fn default() -> Self {
        LaunchRequest {
            name: String::new(),
            command: String::new(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            grants: Vec::new(),
            deny_read: Vec::new(),
            deny_write: Vec::new(),
            network: NetworkConfig::None,
            sandboxed: true,
            policy: SandboxPolicy::Enforce,
            backend: Backend::Auto,
            profile: None,
            profiles_dir: None,
            state_root: None,
            trace_log: None,
            allow_broad: false,
            limits: ResourceLimits::default(),
            egress: EgressSocket::NotStarted,
            write_protect: true,
            session_dir: None,
        }
    }
}

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
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
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
    held: Vec<OwnedFd>,
    /// Private files the child reads (srt's settings); removed when this is dropped.
    pub(crate) files: Vec<tempfile::TempPath>,
    /// The server's cgroup (memory and task limits), removed when this is dropped: keep it
    /// until the child is reaped.
    cgroup: Option<super::cgroup::Cgroup>,
    /// The task limit the supervisor must enforce itself by counting (see
    /// `task_count`): set where neither a cgroup nor RLIMIT_NPROC holds it (root, no pids
    /// cgroup).
    task_watch: Option<u64>,
    /// The Landlock tier's private HOME and TMPDIR, removed when this is dropped: keep it
    /// until the child is reaped.
    scratch: Option<Scratch>,
}

impl Prepared {
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
        let count = super::task_count::count_tasks(pid, limit + 3)?;
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
        }
    }

    /// True when the child reads files this value owns (it must outlive the child, so
    /// the caller spawns and waits instead of exec'ing).
    pub fn owns_files(&self) -> bool {
        !self.files.is_empty() || self.scratch.is_some()
    }
}

/// Resolves, builds and renders the sandbox for `req`, probing the machine fully first.
/// Callers that launch many servers probe once and call `prepare_with`.
pub fn prepare(req: &LaunchRequest) -> Result<Prepared, LaunchError> {
    prepare_with(req, &capabilities::probe(Depth::Full))
}

/// What `req` asks of the machine.
pub fn needs(req: &LaunchRequest) -> Needs {
    let egress = matches!(req.network, NetworkConfig::Allowlist(_));
    Needs {
        sandboxed: req.sandboxed,
        backend: req.backend,
        egress,
        egress_problem: match &req.egress {
            EgressSocket::Failed(why) if egress => Some(why.clone()),
            _ => None,
        },
    }
}

/// The enforce/warn decision for `req` on a machine with `caps`, without building anything.
pub fn resolution(req: &LaunchRequest, caps: &Capabilities) -> Resolution {
    resolve::resolve(caps, &needs(req), req.policy)
}

/// `prepare` with capabilities probed by the caller.
pub fn prepare_with(req: &LaunchRequest, caps: &Capabilities) -> Result<Prepared, LaunchError> {
    if req.command.trim().is_empty() {
        return Err(LaunchError::Invalid(
            "no command given: put the command and its arguments after `--`".into(),
        ));
    }
    let host = HostEnv::current();
    let profiled = match profile_for(req, &host)? {
        Some((selected, plan)) => Some(with_profile(req, &selected, &plan)?),
        None => None,
    };
    let (req, extra_mounts, share_pid) = match &profiled {
        Some(p) => (&p.req, p.mounts.clone(), p.share_pid),
        None => (req, Vec::new(), false),
    };
    let grants = validate_grants(req, host.home.as_deref())?;
    let env = sandbox_env(req, &host)?;
    let path_var = env.get("PATH").cloned().unwrap_or_default();
    let lookup_cwd = match &req.cwd {
        Some(c) => c.clone(),
        None => std::env::current_dir().map_err(|e| io("cannot read the current directory", e))?,
    };
    let lookup = Lookup {
        path_var: &path_var,
        cwd: &lookup_cwd,
        home: host.home.as_deref(),
    };
    let program = closure::resolve_program(&req.command, &lookup)?;

    // A proxy nobody started is a proxy that is not running (fail closed, say so).
    let mut resolved_req;
    let req = if req.egress == EgressSocket::NotStarted
        && matches!(req.network, NetworkConfig::Allowlist(_))
    {
        resolved_req = req.clone();
        resolved_req.egress =
            EgressSocket::Failed("no egress proxy was started for this server".into());
        &resolved_req
    } else {
        req
    };

    let plan = match resolution(req, caps) {
        Resolution::Refused { reasons } => {
            return Err(LaunchError::Refused {
                name: req.name.clone(),
                reasons: reasons.iter().map(ToString::to_string).collect(),
            })
        }
        Resolution::OptedOut => {
            return Ok(direct(req, &program, &host, Enforcement::OptedOut));
        }
        Resolution::Degraded { plan, reasons } if !plan.contained() => {
            let enforcement = Enforcement::Degraded {
                backend: None,
                reasons: reasons.iter().map(ToString::to_string).collect(),
            };
            return Ok(direct(req, &program, &host, enforcement));
        }
        Resolution::Degraded { plan, reasons } => (
            plan,
            Enforcement::Degraded {
                backend: Some(tier_of(&plan)),
                reasons: reasons.iter().map(ToString::to_string).collect(),
            },
        ),
        Resolution::Sandboxed { plan } => (
            plan,
            Enforcement::Sandboxed {
                backend: tier_of(&plan),
            },
        ),
    };
    let (plan, enforcement) = plan;
    if plan.landlock {
        let spec = build_spec(
            req,
            SpecInputs {
                program: &program,
                grants,
                profile_mounts: extra_mounts,
                env,
                lookup: &lookup,
            },
            &plan,
            caps,
        )?;
        let why = resolve::tier(caps, req.backend).1;
        return landlocked(&spec, req, enforcement, caps, &why);
    }
    let Some(bwrap_info) = &caps.bwrap else {
        // resolve only plans bwrap when it was found; fail closed if that ever changes.
        return Err(LaunchError::Refused {
            name: req.name.clone(),
            reasons: vec!["bubblewrap is not available".into()],
        });
    };
    let mut spec = build_spec(
        req,
        SpecInputs {
            program: &program,
            grants,
            profile_mounts: extra_mounts,
            env,
            lookup: &lookup,
        },
        &plan,
        caps,
    )?;
    spec.share_pid = share_pid;
    if plan.srt {
        return super::srt::prepare(&spec, req, caps, enforcement);
    }
    sandboxed(&spec, &bwrap_info.path, req, enforcement)
}

/// The backend a plan runs under.
fn tier_of(plan: &Plan) -> Backend {
    if plan.srt {
        Backend::Srt
    } else if plan.landlock {
        Backend::Landlock
    } else {
        Backend::Bwrap
    }
}

/// What the Landlock tier never enforces, whatever the configuration (launch log, `check`,
/// docs/security.md).
pub const LANDLOCK_NOT_ENFORCED: &[&str] = &[
    "no PID namespace: host processes are visible in /proc (their command lines; not their \
     environment, memory or descriptors)",
    "no private hostname or IPC namespace",
    "no private /tmp: TMPDIR and HOME are private scratch directories, /tmp itself is closed",
    "the server's child processes are not killed with it when palisade dies abruptly",
];

/// The private HOME and TMPDIR of one Landlock launch: host directories created 0700 and
/// removed (with everything the server left in them) when the launch is dropped.
#[derive(Debug)]
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn create(name: &str) -> Result<Scratch, LaunchError> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let safe: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(40)
            .collect();
        let dir = tempfile::Builder::new()
            .prefix(&format!("palisade-{safe}-"))
            .tempdir()
            .map_err(|e| io("cannot create the private HOME/TMPDIR directory", e))?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io("cannot make the private HOME/TMPDIR directory private", e))?;
        for sub in ["home", "tmp"] {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir.path().join(sub))
                .map_err(|e| io("cannot create the private HOME/TMPDIR directory", e))?;
        }
        Ok(Scratch { dir })
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn tmp(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }
}

/// The Landlock command for `spec`: ruleset built here, restrict-self and seccomp in the
/// child right before exec.
fn landlocked(
    spec: &SandboxSpec,
    req: &LaunchRequest,
    mut enforcement: Enforcement,
    caps: &Capabilities,
    why: &str,
) -> Result<Prepared, LaunchError> {
    use super::landlock::{self as ll, Net};
    let refuse = |reasons: Vec<String>| LaunchError::Refused {
        name: req.name.clone(),
        reasons,
    };
    let Some(abi) = caps.landlock.abi() else {
        // resolve only plans Landlock when the kernel has it; fail closed if that changes.
        return Err(refuse(vec!["Landlock is not available".into()]));
    };
    if req.trace_log.is_some() {
        return Err(LaunchError::Invalid(
            "--trace-denials works under the bwrap backend only; run with --backend bwrap".into(),
        ));
    }
    let canon = |p: &PathBuf| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
    let scratch = Scratch::create(&req.name)?;
    let (home, tmp) = (canon(&scratch.home()), canon(&scratch.tmp()));
    let mut env = spec.env.clone();
    if !req.env.contains_key("HOME") {
        env.insert("HOME".into(), home.display().to_string());
    }
    if !req.env.contains_key("TMPDIR") {
        env.insert("TMPDIR".into(), tmp.display().to_string());
    }
    let cwd = if spec.cwd == spec.home && !req.env.contains_key("HOME") {
        home.clone()
    } else {
        spec.cwd.clone()
    };
    let mut read_only = if req.write_protect {
        write_protected(&req.name, spec)
    } else {
        Vec::new()
    };
    read_only.extend(req.deny_write.iter().map(|p| {
        std::fs::canonicalize(p).unwrap_or_else(|_| crate::roots::canon::resolve_existing_prefix(p))
    }));
    let net = if spec.network == NetworkSpec::Host {
        Net::Host
    } else {
        Net::Closed
    };
    let plan = ll::plan(
        &ll::Inputs {
            spec,
            read_only: &read_only,
            scratch: &[home.clone(), tmp.clone()],
            net,
        },
        &ll::list_dir,
        &|p: &Path| p.is_dir(),
    );
    for note in &plan.notes {
        tracing::info!(server = %req.name, "landlock: {note}");
    }
    if !plan.gaps.is_empty() {
        let gaps: Vec<String> = plan.gaps.iter().map(ToString::to_string).collect();
        match req.policy {
            SandboxPolicy::Enforce => return Err(refuse(gaps)),
            SandboxPolicy::Warn => {
                // The grant that could not be carved is granted whole: weaker, and said.
                enforcement = match enforcement {
                    Enforcement::Degraded {
                        backend,
                        mut reasons,
                    } => {
                        reasons.extend(gaps);
                        Enforcement::Degraded { backend, reasons }
                    }
                    _ => Enforcement::Degraded {
                        backend: Some(Backend::Landlock),
                        reasons: gaps,
                    },
                };
            }
        }
    }
    let mut plan = plan;
    // warn: the grants that could not be carved are granted whole, as the reasons say.
    let uncarved = std::mem::take(&mut plan.uncarved);
    plan.rules.extend(uncarved);
    let ruleset = ll::build(&plan, abi).map_err(|e| refuse(vec![e.to_string()]))?;
    let filter = if spec.seccomp {
        let sockets = match net {
            Net::Closed => seccomp::Sockets::Landlock {
                inet: seccomp::Inet::None,
            },
            Net::Host => seccomp::Sockets::Landlock {
                inet: seccomp::Inet::Any,
            },
        };
        Some(
            seccomp::program_with(std::env::consts::ARCH, sockets)
                .map_err(|e| refuse(vec![e.to_string()]))?,
        )
    } else {
        None
    };
    tracing::info!(
        server = %req.name,
        abi,
        why,
        "sandboxed by landlock; not enforced by this tier: {}",
        LANDLOCK_NOT_ENFORCED.join("; ")
    );
    let mut cmd = std::process::Command::new(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(&env)
        .current_dir(&cwd);
    let cgroup = make_cgroup(&req.name, &spec.limits);
    let task_watch = task_watch(&spec.limits, cgroup.as_ref());
    let mut rlimits = fallback_rlimits(&spec.limits);
    if let Some(cg) = &cgroup {
        if cg.limits_memory() {
            rlimits.data = None;
        }
        if cg.limits_pids() {
            rlimits.processes = None;
        }
        sys::join_cgroups(&mut cmd, cg.procs_files());
    }
    sys::install_child_setup(&mut cmd, None, rlimits);
    sys::install_landlock(
        &mut cmd,
        sys::raw(&ruleset),
        filter,
        nix::unistd::geteuid().is_root(),
    );
    let mut argv = vec![spec.program.as_os_str().to_os_string()];
    argv.extend(spec.args.iter().map(OsString::from));
    Ok(Prepared {
        command: tokio::process::Command::from(cmd),
        enforcement,
        argv,
        held: vec![ruleset],
        files: Vec::new(),
        cgroup,
        task_watch,
        scratch: Some(scratch),
    })
}

/// What palisade takes from its own environment (and nothing else).
pub struct HostEnv {
    path: String,
    home: Option<PathBuf>,
    lang: Option<String>,
}

impl HostEnv {
    pub fn current() -> Self {
        HostEnv {
            path: std::env::var("PATH")
                .ok()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| DEFAULT_PATH.to_string()),
            home: std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|h| h.is_absolute() && h != Path::new("/")),
            lang: std::env::var("LANG").ok().filter(|l| !l.is_empty()),
        }
    }
}

const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";
/// HOME inside the sandbox when palisade has none of its own.
const FALLBACK_HOME: &str = "/home/sandbox";

/// The sandbox's whole environment: PATH, HOME, TMPDIR, LANG, then the request's env.
fn sandbox_env(
    req: &LaunchRequest,
    host: &HostEnv,
) -> Result<BTreeMap<String, String>, LaunchError> {
    let mut env = BTreeMap::new();
    env.insert("PATH".to_string(), host.path.clone());
    let home = host
        .home
        .clone()
        .unwrap_or_else(|| PathBuf::from(FALLBACK_HOME));
    env.insert("HOME".to_string(), home.display().to_string());
    env.insert("TMPDIR".to_string(), "/tmp".to_string());
    env.insert(
        "LANG".to_string(),
        host.lang.clone().unwrap_or_else(|| "C.UTF-8".into()),
    );
    for (k, v) in &req.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(LaunchError::Invalid(format!(
                "invalid environment variable name `{k}`: names are non-empty and have no `=`"
            )));
        }
        env.insert(k.clone(), v.clone());
    }
    if !Path::new(&env["HOME"]).is_absolute() {
        return Err(LaunchError::Invalid(format!(
            "HOME={} is not an absolute path; give an absolute HOME or leave it unset",
            env["HOME"]
        )));
    }
    Ok(env)
}

/// A directory no one should get read-write (or `/` at all) by accident.
fn is_broad_grant(path: &Path, home: Option<&Path>) -> bool {
    path == Path::new("/")
        || path == Path::new("/root")
        || path == Path::new("/home")
        || path.parent() == Some(Path::new("/home"))
        || home.is_some_and(|h| std::fs::canonicalize(h).map_or_else(|_| h == path, |h| h == path))
}

/// Checks every grant before anything starts: it exists, is readable, is not broader than
/// allowed, and is not granted twice with different access. Returns canonical mounts.
fn validate_grants(req: &LaunchRequest, home: Option<&Path>) -> Result<Vec<Mount>, LaunchError> {
    let mut mounts: Vec<Mount> = Vec::new();
    for g in &req.grants {
        let shown = g.path.display();
        if !g.path.is_absolute() {
            return Err(LaunchError::Invalid(format!(
                "grant {shown} is not an absolute path; give the full path"
            )));
        }
        let meta = std::fs::metadata(&g.path).map_err(|e| {
            LaunchError::Invalid(match e.kind() {
                std::io::ErrorKind::NotFound => {
                    format!("grant {shown} does not exist; create it first or fix the path")
                }
                _ => format!("grant {shown} cannot be accessed ({e}); fix its permissions"),
            })
        })?;
        let real = std::fs::canonicalize(&g.path)
            .map_err(|e| io(&format!("cannot canonicalise grant {shown}"), e))?;
        let mode = if meta.is_dir() {
            nix::unistd::AccessFlags::R_OK | nix::unistd::AccessFlags::X_OK
        } else {
            nix::unistd::AccessFlags::R_OK
        };
        if nix::unistd::access(&real, mode).is_err() {
            return Err(LaunchError::Invalid(format!(
                "grant {shown} is not readable by palisade; fix its permissions"
            )));
        }
        if g.access == Access::Rw
            && nix::unistd::access(&real, nix::unistd::AccessFlags::W_OK).is_err()
        {
            return Err(LaunchError::Invalid(format!(
                "grant {shown} is not writable by palisade; grant it read-only (--ro) or fix its permissions"
            )));
        }
        if !req.allow_broad {
            if real == Path::new("/") {
                return Err(LaunchError::Invalid(
                    "refusing to grant / (the whole filesystem, /etc/shadow and every home included); \
                     grant the directories the command needs, or pass --allow-broad"
                        .into(),
                ));
            }
            if g.access == Access::Rw && is_broad_grant(&real, home) {
                return Err(LaunchError::Invalid(format!(
                    "refusing read-write grant of {} (a home directory); grant a narrower directory, or pass --allow-broad",
                    real.display()
                )));
            }
        }
        if let Some(prev) = mounts.iter().find(|m| m.path == real) {
            if prev.access != g.access {
                return Err(LaunchError::Invalid(format!(
                    "{} is granted both read-only and read-write; keep one of --ro/--rw",
                    real.display()
                )));
            }
            continue;
        }
        mounts.push(Mount {
            path: real,
            access: g.access,
            origin: MountOrigin::Root,
        });
    }
    Ok(mounts)
}

/// The request with a profile applied, plus what the spec needs from it.
struct Profiled {
    req: LaunchRequest,
    mounts: Vec<Mount>,
    share_pid: bool,
}

/// The profile `req` gets (named or matched) and its expansion for this launch, without
/// touching the filesystem beyond reading the profiles directory.
pub fn profile_for(
    req: &LaunchRequest,
    host: &HostEnv,
) -> Result<Option<(profiles::Selected, profiles::Plan)>, LaunchError> {
    let catalog = profiles::Catalog::load(req.profiles_dir.as_deref())
        .map_err(|e| LaunchError::Invalid(e.to_string()))?;
    let selected = profiles::select(&catalog, req.profile.as_deref(), &req.command, &req.args)
        .map_err(|e| LaunchError::Invalid(format!("server `{}`: {e}", req.name)))?;
    let Some(selected) = selected else {
        return Ok(None);
    };
    let sandbox_home = req
        .env
        .get("HOME")
        .map(PathBuf::from)
        .or_else(|| host.home.clone())
        .unwrap_or_else(|| PathBuf::from(FALLBACK_HOME));
    let state_dir = state_dir_for(req, host.home.as_deref());
    let needs_state = selected.profile.state.is_some();
    let state_dir = match state_dir {
        Some(d) => d,
        None if needs_state => {
            return Err(LaunchError::Invalid(format!(
                "server `{}`: profile {} keeps state but there is no HOME for the default state directory; set palisade.stateDir (or --state-dir)",
                req.name, selected.profile.name
            )))
        }
        // Not used: the profile has no state.
        None => PathBuf::new(),
    };
    let plan = profiles::plan(
        &selected.profile,
        &profiles::Context {
            host_home: host.home.as_deref(),
            sandbox_home: &sandbox_home,
            state_dir: &state_dir,
        },
    );
    Ok(Some((selected, plan)))
}

/// `<state_root>/<name>`: the private state directory of server `name` (not created here).
pub fn state_dir_for(req: &LaunchRequest, host_home: Option<&Path>) -> Option<PathBuf> {
    let root = req
        .state_root
        .clone()
        .or_else(|| host_home.map(|h| h.join(".local/state/palisade/servers")))?;
    // Server names from a config are already safe; `run` names come from a file name.
    let safe: String = req
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let safe = if safe.is_empty() || safe.chars().all(|c| c == '.') {
        "server".to_string()
    } else {
        safe
    };
    Some(root.join(safe))
}

/// Applies an expanded profile: env under the user's, domains into the allowlist, the state
/// directory created (0700) and mounted read-write, existing read paths mounted read-only.
fn with_profile(
    req: &LaunchRequest,
    selected: &profiles::Selected,
    plan: &profiles::Plan,
) -> Result<Profiled, LaunchError> {
    use std::os::unix::fs::DirBuilderExt;
    tracing::info!(server = %req.name, profile = %selected.profile.name, why = %selected.why, "sandbox profile");
    let mut out = req.clone();
    for (k, v) in &plan.env {
        out.env.entry(k.clone()).or_insert_with(|| v.clone());
    }
    if let Some(roots_as) = &selected.profile.roots_as {
        let delivery = deliver_roots(req, roots_as);
        tracing::debug!(server = %req.name, args = ?delivery.args, env = ?delivery.env, "roots delivered per the profile's rootsAs");
        out.args.extend(delivery.args);
        for (k, v) in delivery.env {
            out.env.entry(k).or_insert(v);
        }
    }
    if !plan.domains.is_empty() {
        let mut lists = match &req.network {
            NetworkConfig::Allowlist(l) => l.clone(),
            NetworkConfig::None => Default::default(),
        };
        for d in &plan.domains {
            if !lists.allowed_domains.contains(d) {
                lists.allowed_domains.push(d.clone());
            }
        }
        out.network = NetworkConfig::Allowlist(lists);
    }
    let mut mounts = Vec::new();
    if let Some(dir) = &plan.state_dir {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                io(
                    &format!("cannot create state directory {}", dir.display()),
                    e,
                )
            })?;
        let real = std::fs::canonicalize(dir)
            .map_err(|e| io(&format!("cannot canonicalise {}", dir.display()), e))?;
        mounts.push(Mount {
            path: real,
            access: Access::Rw,
            origin: MountOrigin::State,
        });
    }
    for p in &plan.read {
        match std::fs::canonicalize(p) {
            Ok(real) if real != Path::new("/") => mounts.push(Mount {
                path: real,
                access: Access::Ro,
                origin: MountOrigin::Profile,
            }),
            _ => {
                tracing::debug!(server = %req.name, path = %p.display(), "profile read path absent; skipped")
            }
        }
    }
    Ok(Profiled {
        req: out,
        mounts,
        share_pid: plan.share_pid,
    })
}

/// The request's grants as a profile's `rootsAs` delivers them: the directories among them
/// (a file grant is not a root), in grant order, the session sandbox dir last. The grants
/// are exactly what the sandbox mounts and, under the gateway, what `roots/list` announces,
/// so arguments, roots and mounts stay one set (a relaunch after a widening re-delivers).
fn deliver_roots(
    req: &LaunchRequest,
    roots_as: &profiles::RootsAs,
) -> profiles::apply::RootsDelivery {
    let is_session = |p: &Path| req.session_dir.as_deref() == Some(p);
    let own: Vec<PathBuf> = req
        .grants
        .iter()
        .filter(|g| !is_session(&g.path) && g.path.is_dir())
        .map(|g| g.path.clone())
        .fold(Vec::new(), |mut acc, p| {
            if !acc.contains(&p) {
                acc.push(p);
            }
            acc
        });
    let session = req
        .session_dir
        .as_deref()
        .filter(|s| req.grants.iter().any(|g| g.path == *s) && s.is_dir());
    profiles::apply::roots_delivery(
        roots_as,
        profiles::apply::DeliveryRoots { own: &own, session },
        &req.args,
    )
}

fn io(context: &str, source: std::io::Error) -> LaunchError {
    LaunchError::Io {
        context: context.to_string(),
        source,
    }
}

/// What one launch contributes to its spec, beyond the request and the machine.
struct SpecInputs<'a> {
    /// The resolved executable.
    program: &'a Path,
    /// The request's grants, as mounts.
    grants: Vec<Mount>,
    /// Mounts the profile adds (state dir, extra reads).
    profile_mounts: Vec<Mount>,
    /// The command's complete environment.
    env: BTreeMap<String, String>,
    lookup: &'a Lookup<'a>,
}

/// The spec for a sandboxed launch: base, runtime closure, grants, masks, cwd.
fn build_spec(
    req: &LaunchRequest,
    inputs: SpecInputs<'_>,
    plan: &Plan,
    caps: &Capabilities,
) -> Result<SandboxSpec, LaunchError> {
    let SpecInputs {
        program,
        mut grants,
        profile_mounts,
        mut env,
        lookup,
    } = inputs;
    let system = base::discover();
    let home = PathBuf::from(&env["HOME"]);
    // Profile mounts are shown like grants (after the closure, so a state dir inside an
    // install directory stays writable), but a user grant of the same path wins.
    for m in profile_mounts {
        if !grants.iter().any(|g| g.path == m.path) {
            grants.push(m);
        }
    }
    let covered_by = |p: &Path, ms: &[Mount]| ms.iter().any(|m| p.starts_with(&m.path));
    let runtime: Vec<Mount> = closure::closure(program, &req.args, lookup)
        .into_iter()
        .filter(|p| !covered_by(p, &grants))
        .map(|path| Mount {
            path,
            access: Access::Ro,
            origin: MountOrigin::Runtime,
        })
        .collect();
    let cwd = match &req.cwd {
        None => home.clone(),
        Some(c) => {
            let real = std::fs::canonicalize(c).map_err(|e| {
                LaunchError::Invalid(format!(
                    "working directory {} cannot be used ({e}); fix --cwd",
                    c.display()
                ))
            })?;
            let visible = covered_by(&real, &grants)
                || covered_by(&real, &runtime)
                || real.starts_with(&home)
                || real.starts_with("/tmp");
            if !visible {
                return Err(LaunchError::Invalid(format!(
                    "working directory {} is not inside any grant; add --ro {0} or --rw {0}, or choose a --cwd inside a grant",
                    real.display()
                )));
            }
            real
        }
    };
    let mut mounts = system.mounts;
    mounts.extend(runtime);
    mounts.extend(grants);
    let network = network_spec(req, plan, caps)?;
    if let NetworkSpec::Proxied { socat, .. } = &network {
        // The bridges run inside: socat must be visible (it usually is, under /usr).
        if !covered_by(socat, &mounts) {
            mounts.push(Mount {
                path: socat.clone(),
                access: Access::Ro,
                origin: MountOrigin::Network,
            });
        }
        if let Some(opts) = crate::egress::wiring::WiringOptions::from_spec(&network) {
            env.extend(crate::egress::wiring::wiring(&opts).env);
        }
    }
    let deny = req
        .deny_read
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    Ok(SandboxSpec {
        program: program.to_path_buf(),
        args: req.args.clone(),
        env,
        cwd,
        mounts,
        links: system.links,
        deny,
        home,
        network,
        limits: req.limits,
        share_pid: false,
        seccomp: plan.seccomp,
    })
}

/// The network a planned launch gets: the host's (warn-mode degradation), the proxy's
/// (an allowlist, its socket ready, socat found), or loopback only.
fn network_spec(
    req: &LaunchRequest,
    plan: &Plan,
    caps: &Capabilities,
) -> Result<NetworkSpec, LaunchError> {
    if plan.host_network {
        return Ok(NetworkSpec::Host);
    }
    if plan.srt || !matches!(req.network, NetworkConfig::Allowlist(_)) {
        // srt renders the lists itself (see `sandbox::srt`).
        return Ok(NetworkSpec::None);
    }
    match (&req.egress, &caps.socat) {
        (EgressSocket::Ready(socket), Some(socat)) => Ok(NetworkSpec::Proxied {
            socket: socket.clone(),
            http_port: crate::egress::wiring::HTTP_PORT,
            socks_port: crate::egress::wiring::SOCKS_PORT,
            socat: std::fs::canonicalize(socat).unwrap_or_else(|_| socat.clone()),
        }),
        // resolve only plans a private network with an allowlist when both are there; fail
        // closed if that ever changes.
        _ => Err(LaunchError::Refused {
            name: req.name.clone(),
            reasons: vec!["the egress proxy or socat is not available".into()],
        }),
    }
}

pub use super::write_protect::WRITE_PROTECTED;

/// The `WRITE_PROTECTED` paths that exist as real files or directories inside the
/// read-write mounts of `spec`, down to `write_protect::SEARCH_DEPTH` levels below each.
/// Paths that do not exist stay creatable: bwrap would have to create a mount point on the
/// host to protect them (see docs/security.md, gaps).
fn write_protected(name: &str, spec: &SandboxSpec) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for m in spec.mounts.iter().filter(|m| m.access == Access::Rw) {
        let found = super::write_protect::find(&m.path);
        if found.truncated {
            tracing::warn!(
                server = %name,
                grant = %m.path.display(),
                "write protection searched only the first {} directories of this grant; \
                 git hooks and rc files deeper in it are not protected",
                super::write_protect::DIR_BUDGET
            );
        }
        out.extend(found.paths);
    }
    out
}

/// The bwrap command for `spec`.
fn sandboxed(
    spec: &SandboxSpec,
    bwrap_path: &Path,
    req: &LaunchRequest,
    enforcement: Enforcement,
) -> Result<Prepared, LaunchError> {
    let mut held = Vec::new();
    let mut render = Render {
        seccomp_fd: None,
        masks: spec
            .deny
            .iter()
            .map(|p| {
                if p.is_dir() {
                    Mask::Dir(p.clone())
                } else {
                    Mask::File(p.clone())
                }
            })
            .collect(),
        write_protect: if req.write_protect {
            write_protected(&req.name, spec)
        } else {
            Vec::new()
        },
    };
    // denyWrite holds whatever `protectDangerousFiles` says: the user named these paths.
    let denied = super::deny_write::protect(&spec.mounts, &req.deny_write)
        .map_err(|e| LaunchError::Invalid(format!("server `{}`: {e}", req.name)))?;
    render.write_protect.extend(denied);
    if spec.seccomp {
        let prog = seccomp::program().map_err(|e| LaunchError::Refused {
            name: req.name.clone(),
            reasons: vec![e.to_string()],
        })?;
        let fd = sys::memfd_with(c"palisade-seccomp", &seccomp::to_bytes(&prog))
            .map_err(|e| io("cannot create the seccomp program's memfd", e))?;
        render.seccomp_fd = Some(sys::raw(&fd));
        held.push(fd);
    }
    let mut args = bwrap::render(spec, &render);
    let mut program = bwrap_path.to_path_buf();
    if let Some(log) = &req.trace_log {
        // strace outside the sandbox follows bwrap into it; the sandbox itself is unchanged.
        let strace = which::which("strace").map_err(|_| {
            LaunchError::Invalid(
                "--trace-denials needs strace (Debian/Ubuntu: apt install strace)".into(),
            )
        })?;
        // `-I 1`: strace blocks fatal signals by default when it writes to a file, so a
        // SIGTERM to `palisade run --trace-denials` would leave it (and the sandbox) running.
        let mut wrapped: Vec<OsString> = [
            "-f",
            "-qq",
            "-I",
            "1",
            "-s",
            "512",
            "-e",
            "trace=%file,%network",
            "-o",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        wrapped.push(log.clone().into());
        wrapped.push("--".into());
        wrapped.push(bwrap_path.as_os_str().to_os_string());
        wrapped.extend(args);
        args = wrapped;
        program = strace;
    }
    let mut cmd = std::process::Command::new(&program);
    cmd.args(&args).env_clear().envs(&spec.env);
    let cgroup = make_cgroup(&req.name, &spec.limits);
    let task_watch = task_watch(&spec.limits, cgroup.as_ref());
    let mut rlimits = fallback_rlimits(&spec.limits);
    if let Some(cg) = &cgroup {
        // The cgroup limits the tree; the per-process fallbacks would only add limits the
        // user did not ask for.
        if cg.limits_memory() {
            rlimits.data = None;
        }
        if cg.limits_pids() {
            rlimits.processes = None;
        }
        sys::join_cgroups(&mut cmd, cg.procs_files());
    }
    sys::install_child_setup(&mut cmd, render.seccomp_fd, rlimits);
    let mut argv = vec![program.as_os_str().to_os_string()];
    argv.extend(args);
    Ok(Prepared {
        command: tokio::process::Command::from(cmd),
        enforcement,
        argv,
        held,
        files: Vec::new(),
        cgroup,
        task_watch,
        scratch: None,
    })
}

/// The rlimits to set when no cgroup enforces memory and tasks: the task budget made
/// per-server (see `sys::nproc_fallback`).
fn fallback_rlimits(l: &ResourceLimits) -> ResourceLimits {
    ResourceLimits {
        processes: l.processes.map(sys::nproc_fallback),
        ..*l
    }
}

/// The server's cgroup, or none when the machine offers no writable controller or the config
/// says `cgroup: false` (the rlimit fallbacks then apply; logged, not fatal).
fn make_cgroup(name: &str, l: &ResourceLimits) -> Option<super::cgroup::Cgroup> {
    let limits = super::cgroup::CgroupLimits {
        memory_bytes: l.memory,
        pids: l.pids,
    };
    let made = if !l.cgroup {
        // `sandbox.limits.cgroup: false`, or `palisade run` (nothing would remove it).
        tracing::debug!(server = %name, "no cgroup asked for: rlimits only");
        None
    } else {
        match super::cgroup::Cgroup::create(name, limits) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(server = %name, "no cgroup for memory and task limits ({e}); rlimits only (see `palisade check`)");
                None
            }
        }
    };
    if let Some(cg) = &made {
        // A partly delegated cgroup (memory but not pids, or the reverse): say which limit
        // falls back to its rlimit.
        if l.memory.is_some() && !cg.limits_memory() {
            tracing::warn!(server = %name, "no memory controller in its cgroup: memoryMb bounds each process (RLIMIT_DATA), not the tree (see `palisade check`)");
        }
        if l.pids.is_some() && !cg.limits_pids() && !nix::unistd::getuid().is_root() {
            tracing::warn!(server = %name, "no pids controller in its cgroup: processes is held by RLIMIT_NPROC (see `palisade check`)");
        }
    }
    let pids_held = made.as_ref().is_some_and(|c| c.limits_pids());
    if !pids_held && l.pids.is_some() && nix::unistd::getuid().is_root() {
        tracing::warn!(
            server = %name,
            "its task limit is not enforced by the kernel: no cgroup, and the kernel exempts uid 0 \
             from RLIMIT_NPROC (`serve` counts the server's tasks every 0.5 s and kills it past \
             the limit; `run` cannot)"
        );
    }
    made
}

/// The task limit the supervisor must count itself: where no pids cgroup holds it and the
/// user is root, whom RLIMIT_NPROC does not bind.
fn task_watch(l: &ResourceLimits, cgroup: Option<&super::cgroup::Cgroup>) -> Option<u64> {
    let pids_cgroup = cgroup.is_some_and(|c| c.limits_pids());
    if pids_cgroup || !nix::unistd::getuid().is_root() {
        return None;
    }
    l.pids
}

/// A command run without a sandbox (warn mode or opted out): still a clean environment and
/// no inherited descriptors.
fn direct(
    req: &LaunchRequest,
    program: &Path,
    host: &HostEnv,
    enforcement: Enforcement,
) -> Prepared {
    let mut cmd = std::process::Command::new(program);
    cmd.args(&req.args).env_clear().env("PATH", &host.path);
    if let Some(h) = &host.home {
        cmd.env("HOME", h);
    }
    if let Some(l) = &host.lang {
        cmd.env("LANG", l);
    }
    cmd.envs(&req.env);
    if let Some(c) = &req.cwd {
        cmd.current_dir(c);
    }
    sys::install_child_setup(&mut cmd, None, fallback_rlimits(&req.limits));
    let mut argv = vec![program.as_os_str().to_os_string()];
    argv.extend(req.args.iter().map(OsString::from));
    Prepared {
        command: tokio::process::Command::from(cmd),
        enforcement,
        argv,
        held: Vec::new(),
        files: Vec::new(),
        cgroup: None,
        task_watch: task_watch(&req.limits, None),
        scratch: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selected(name: &str) -> (profiles::Selected, profiles::Plan) {
        let catalog = profiles::Catalog::load(None).unwrap();
        let selected = profiles::select(&catalog, Some(name), "x", &[])
            .unwrap()
            .unwrap();
        let plan = profiles::plan(
            &selected.profile,
            &profiles::Context {
                host_home: None,
                sandbox_home: Path::new("/home/sandbox"),
                state_dir: Path::new("/nonexistent-state"),
            },
        );
        (selected, plan)
    }

    fn grant(path: &Path, access: Access) -> Grant {
        Grant {
            path: path.to_path_buf(),
            access,
        }
    }

    #[test]
    fn roots_as_appends_the_grant_directories_with_the_session_dir_last() {
        let t = tempfile::tempdir().unwrap();
        let (session, a, b) = (t.path().join("s"), t.path().join("a"), t.path().join("b"));
        for d in [&session, &a, &b] {
            std::fs::create_dir(d).unwrap();
        }
        let file = t.path().join("f.txt");
        std::fs::write(&file, "x").unwrap();
        let req = LaunchRequest {
            name: "fs".into(),
            command: "node".into(),
            args: vec!["index.js".into(), b.display().to_string()],
            grants: vec![
                grant(&session, Access::Rw),
                grant(&a, Access::Rw),
                grant(&file, Access::Ro),
                grant(&b, Access::Ro),
            ],
            session_dir: Some(session.clone()),
            ..LaunchRequest::default()
        };
        let (sel, plan) = selected("server-filesystem");
        let out = with_profile(&req, &sel, &plan).unwrap().req;
        let shown = |p: &Path| p.display().to_string();
        assert_eq!(
            out.args,
            [
                "index.js".to_string(),
                shown(&b),
                shown(&a),
                shown(&session)
            ],
            "a file grant is not a root; a root the user already passed is not repeated"
        );
    }

    #[test]
    fn roots_as_only_first_skips_the_session_dir_and_keeps_the_users_flag() {
        let t = tempfile::tempdir().unwrap();
        let (session, repo) = (t.path().join("s"), t.path().join("repo"));
        for d in [&session, &repo] {
            std::fs::create_dir(d).unwrap();
        }
        let mut req = LaunchRequest {
            name: "git".into(),
            command: "mcp-server-git".into(),
            grants: vec![grant(&session, Access::Rw), grant(&repo, Access::Rw)],
            session_dir: Some(session.clone()),
            ..LaunchRequest::default()
        };
        let (sel, plan) = selected("mcp-server-git");
        let out = with_profile(&req, &sel, &plan).unwrap().req;
        assert_eq!(
            out.args,
            ["--repository".to_string(), repo.display().to_string()]
        );
        req.grants.truncate(1);
        let out = with_profile(&req, &sel, &plan).unwrap().req;
        assert!(
            out.args.is_empty(),
            "the session dir alone is no repository: {:?}",
            out.args
        );
    }

    #[test]
    fn no_roots_as_no_arguments() {
        let t = tempfile::tempdir().unwrap();
        let req = LaunchRequest {
            name: "time".into(),
            command: "mcp-server-time".into(),
            grants: vec![grant(t.path(), Access::Rw)],
            ..LaunchRequest::default()
        };
        let (sel, plan) = selected("mcp-server-time");
        assert!(with_profile(&req, &sel, &plan).unwrap().req.args.is_empty());
    }
}
