//! `palisade check`: what this machine can enforce, and what would happen to each server.
//! Probes for real (a trivial sandbox is started), resolves each configured server without
//! starting it, prints text for people or `--json` for machines on stdout.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use crate::config::{GatewayConfig, SandboxPolicy, SandboxSetting, ServerConfig};
use crate::sandbox::capabilities::{self, Capabilities, Depth, Landlock, Userns};
use crate::sandbox::launch::{self, LaunchRequest};
use crate::sandbox::resolve::Resolution;

/// Probe the machine and report what it can enforce.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Also report what would happen to each server of this configuration.
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Exit code when a server configured as enforce would be refused.
pub const EXIT_REFUSED: u8 = 3;

#[derive(Debug, Serialize)]
struct Report {
    machine: Capabilities,
    /// How memory and task limits are enforced for servers on this machine.
    resource_limits: crate::sandbox::cgroup::Support,
    /// What a default server (enforce, backend auto, no network) would get.
    default_server: Resolution,
    /// Which tier a default server gets, and why.
    default_tier: Tier,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    servers: Vec<ServerReport>,
}

#[derive(Debug, Serialize)]
struct ServerReport {
    name: String,
    policy: SandboxPolicy,
    /// The sandbox profile the server gets (`name (why)`), or why none could be chosen.
    profile: Option<String>,
    resolution: Resolution,
    tier: Tier,
    /// For a package runner line (`npx -y`, `uvx`, ...): what palisade's cache holds for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    package: Option<PackageReport>,
    /// What will keep it from starting, or starting as configured: its command not found,
    /// a granted path that does not exist.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    problems: Vec<String>,
}

/// What `serve` would meet starting `server`, found without starting it: a command that is
/// not there (a package runner's is the cache's, checked by `package_report`), a grant that
/// does not exist (skipped at start).
fn server_problems(server: &ServerConfig, is_package: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    if !is_package {
        let path_var = std::env::var("PATH").unwrap_or_default();
        let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
        let lookup = crate::sandbox::closure::Lookup {
            path_var: &path_var,
            cwd: &cwd,
            home: home.as_deref(),
            grants: None,
        };
        if let Err(e) = crate::sandbox::closure::resolve_program(&server.command, &lookup) {
            problems.push(e.to_string());
        }
    }
    if let SandboxSetting::Enabled(sb) = &server.sandbox {
        let fs = &sb.filesystem;
        for (key, list) in [
            ("allowWrite", &fs.allow_write),
            ("allowRead", &fs.allow_read),
        ] {
            for p in list {
                let path = match (p.strip_prefix("~/"), &home) {
                    (Some(rest), Some(h)) => h.join(rest),
                    _ => std::path::PathBuf::from(p),
                };
                if !path.exists() {
                    problems.push(format!(
                        "sandbox.filesystem.{key} `{p}` does not exist: serve skips it (create it, \
                         or fix the path)"
                    ));
                }
            }
        }
    }
    problems
}

/// The sandbox tier a server gets and why; for Landlock, what that tier does not enforce.
#[derive(Debug, Serialize)]
struct Tier {
    backend: crate::config::Backend,
    why: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    not_enforced: Vec<&'static str>,
}

fn tier_of(caps: &Capabilities, req: &LaunchRequest) -> Tier {
    let (backend, why) = crate::sandbox::resolve::tier(caps, req.backend);
    Tier {
        backend,
        why,
        not_enforced: if backend == crate::config::Backend::Landlock {
            let mut n = launch::LANDLOCK_NOT_ENFORCED.to_vec();
            if matches!(req.network, crate::config::NetworkConfig::Allowlist(_)) {
                n.push(launch::LANDLOCK_PROXY_NOT_ENFORCED);
            }
            n
        } else {
            Vec::new()
        },
    }
}

/// A package runner server's package, as the cache has it (never fetched by `check`).
#[derive(Debug, Serialize)]
struct PackageReport {
    ecosystem: crate::packages::Ecosystem,
    package: String,
    /// The runner as written (`npx`, `uvx`, ...).
    runner: String,
    /// The locked version; absent when it was not fetched yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    integrity: Option<String>,
    /// The cache entry the server runs from, read-only.
    #[serde(skip_serializing_if = "Option::is_none")]
    entry: Option<std::path::PathBuf>,
    /// What to do when it is not usable yet (not fetched, unreadable cache).
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
}

/// What the cache holds for `server`, when its command is a package runner.
fn package_report(
    server: &ServerConfig,
    profiles: Option<&crate::profiles::Catalog>,
    config: &std::path::Path,
) -> Option<PackageReport> {
    use crate::packages::{classify, Cache, Launcher};
    let Launcher::Package(mut run) = classify(&server.command, &server.args) else {
        return None;
    };
    run.install_scripts =
        crate::packages::hooks::server_install_scripts(profiles, server, run.ecosystem);
    let mut report = PackageReport {
        ecosystem: run.ecosystem,
        package: run.package.clone(),
        runner: run.runner.clone(),
        version: None,
        integrity: None,
        entry: None,
        problem: None,
    };
    let found = Cache::from_env().and_then(|c| Ok(c.lookup(&run)?.map(|r| (c, r))));
    match found {
        Ok(Some((cache, r))) => {
            report.entry = Some(cache.entry_dir(&r.locked));
            report.version = Some(r.locked.version);
            report.integrity = Some(r.locked.integrity);
        }
        Ok(None) => {
            // The client that fetches it (`npm`, `uv`) must be here, or the fetch cannot run.
            let client = match run.ecosystem {
                crate::packages::Ecosystem::Npm => "npm",
                crate::packages::Ecosystem::Pypi => "uv",
            };
            let (missing, needs) = match which::which(client) {
                Ok(_) => (String::new(), String::new()),
                Err(_) => (
                    format!(", and `{client}`, which fetches it, is not installed here"),
                    format!(" and `{client}` is installed"),
                ),
            };
            report.problem = Some(format!(
                "not fetched yet{missing}: run `palisade prefetch --config {}` where the \
                 registry is reachable{needs}",
                config.display(),
            ))
        }
        Err(e) => report.problem = Some(e.to_string()),
    }
    Some(report)
}

pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let caps = capabilities::probe(Depth::Full);
    let default_server = launch::resolution(&LaunchRequest::default(), &caps);
    let default_tier = tier_of(&caps, &LaunchRequest::default());
    let mut servers = Vec::new();
    if let Some(path) = &args.config {
        let cfg = crate::config::load_file(path)
            .with_context(|| format!("cannot check servers of {}", path.display()))?;
        let profiles = crate::packages::hooks::catalog(cfg.settings.profiles_dir.as_deref());
        for (name, server) in &cfg.servers {
            let req = request_for(name, server, &cfg);
            let profile = match launch::profile_for(&req, &launch::HostEnv::current()) {
                Ok(Some((sel, _))) => Some(format!("{} ({})", sel.profile.name, sel.why)),
                Ok(None) => None,
                Err(e) => Some(format!("ERROR: {e}")),
            };
            servers.push(ServerReport {
                name: name.clone(),
                policy: req.policy,
                profile,
                resolution: launch::resolution(&req, &caps),
                package: package_report(server, profiles.as_ref(), path),
                tier: tier_of(&caps, &req),
                problems: server_problems(
                    server,
                    matches!(
                        crate::packages::classify(&server.command, &server.args),
                        crate::packages::Launcher::Package(_)
                    ),
                ),
            });
        }
    }
    let refused = servers
        .iter()
        .any(|s| matches!(s.resolution, Resolution::Refused { .. }));
    let report = Report {
        machine: caps,
        resource_limits: crate::sandbox::cgroup::probe(),
        default_server,
        default_tier,
        servers,
    };
    let out = if args.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        text(&report, args.config.is_some())
    };
    print!("{out}");
    Ok(if refused {
        ExitCode::from(EXIT_REFUSED)
    } else {
        ExitCode::SUCCESS
    })
}

/// The launch request a configured server would get, as far as resolution needs it.
fn request_for(name: &str, server: &ServerConfig, cfg: &GatewayConfig) -> LaunchRequest {
    let global_policy = cfg.settings.sandbox_policy.unwrap_or_default();
    let global_backend = cfg.settings.backend.unwrap_or_default();
    let (sandboxed, policy, backend, network, profile) = match &server.sandbox {
        SandboxSetting::Disabled => (
            false,
            global_policy,
            global_backend,
            Default::default(),
            None,
        ),
        SandboxSetting::Enabled(sb) => (
            true,
            sb.policy.unwrap_or(global_policy),
            sb.backend.unwrap_or(global_backend),
            sb.network.clone(),
            sb.profile.clone(),
        ),
    };
    LaunchRequest {
        name: name.to_string(),
        command: server.command.clone(),
        args: server.args.clone(),
        sandboxed,
        policy,
        backend,
        network,
        profile,
        profiles_dir: cfg.settings.profiles_dir.clone(),
        state_root: cfg.settings.state_dir.clone(),
        ..LaunchRequest::default()
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn text(r: &Report, with_config: bool) -> String {
    let m = &r.machine;
    let mut s = String::new();
    let _ = writeln!(s, "Machine");
    match &m.bwrap {
        Some(b) => {
            let _ = writeln!(
                s,
                "  bubblewrap:            {} ({}; --disable-userns: {})",
                b.path.display(),
                b.version.as_deref().unwrap_or("unknown version"),
                yes(b.disable_userns)
            );
        }
        None => {
            let _ = writeln!(
                s,
                "  bubblewrap:            missing{}",
                m.bwrap_override_problem
                    .as_deref()
                    .map(|p| format!(" ({p})"))
                    .unwrap_or_default()
            );
        }
    }
    let userns = match &m.userns {
        Userns::Usable => "usable (a trial sandbox ran)".to_string(),
        Userns::Unusable { error } => format!("UNUSABLE: {error}"),
        Userns::NotProbed => "not probed".to_string(),
    };
    let opt = |v: Option<u64>| v.map_or("n/a".to_string(), |v| v.to_string());
    let optb = |v: Option<bool>| v.map_or("n/a", yes);
    let _ = writeln!(s, "  user namespaces:       {userns}");
    let _ = writeln!(s, "  max_user_namespaces:   {}", opt(m.max_user_namespaces));
    let _ = writeln!(
        s,
        "  AppArmor userns limit: {}",
        optb(m.apparmor_restrict_userns)
    );
    let _ = writeln!(
        s,
        "  unprivileged userns:   {}",
        optb(m.unprivileged_userns_clone)
    );
    let _ = writeln!(s, "  seccomp:               {}", yes(m.seccomp));
    let landlock = match m.landlock {
        Landlock::Available { abi } => format!(
            "ABI {abi} (filesystem{}{})",
            if abi >= 4 {
                ", TCP ports"
            } else {
                "; TCP ports need ABI 4"
            },
            if abi >= 6 {
                ", abstract unix socket and signal scoping"
            } else {
                "; signal scoping needs ABI 6"
            }
        ),
        Landlock::NotEnabled => "built in but NOT ENABLED (lsm= boot parameter)".into(),
        Landlock::NotImplemented => {
            "UNAVAILABLE (kernel before 5.13, or refused by seccomp)".into()
        }
    };
    let _ = writeln!(s, "  Landlock:              {landlock}");
    let _ = writeln!(
        s,
        "  connect checks:        {}",
        if m.connect_mediation {
            "yes (an allowlist under Landlock is held to the proxy's address)"
        } else {
            "NO (seccomp user notification, pidfd_getfd or process_vm_readv refused or missing: \
             an allowlist under Landlock holds by port only)"
        }
    );
    let path = |p: &Option<std::path::PathBuf>| {
        p.as_ref()
            .map_or("missing".to_string(), |p| p.display().to_string())
    };
    let _ = writeln!(s, "  socat:                 {}", path(&m.socat));
    let _ = writeln!(s, "  srt:                   {}", path(&m.srt));
    limits_lines(&mut s, &r.resource_limits);
    let _ = writeln!(s);
    let _ = writeln!(s, "A default server (enforce, backend auto, no network):");
    describe(&mut s, &r.default_server);
    tier_lines(&mut s, &r.default_tier);
    if with_config {
        let _ = writeln!(s);
        let _ = writeln!(s, "Servers");
        if r.servers.is_empty() {
            let _ = writeln!(s, "  (none configured)");
        }
        for srv in &r.servers {
            let policy = match srv.policy {
                SandboxPolicy::Enforce => "enforce",
                SandboxPolicy::Warn => "warn",
            };
            let _ = write!(s, "  {} ({policy}): ", srv.name);
            describe(&mut s, &srv.resolution);
            tier_lines(&mut s, &srv.tier);
            let _ = writeln!(
                s,
                "      profile: {}",
                srv.profile
                    .as_deref()
                    .unwrap_or("none (the default sandbox)")
            );
            if let Some(p) = &srv.package {
                let state = match (&p.version, &p.entry, &p.problem) {
                    (Some(v), Some(e), _) => format!("{v}, cache entry {}", e.display()),
                    (_, _, Some(problem)) => problem.clone(),
                    _ => "unknown".to_string(),
                };
                let _ = writeln!(
                    s,
                    "      package: {} {} (`{}`): {state}",
                    p.ecosystem, p.package, p.runner
                );
            }
            for problem in &srv.problems {
                let _ = writeln!(s, "      PROBLEM: {problem}");
            }
        }
    }
    s
}

/// Which mechanism enforces `sandbox.limits.memoryMb` and `processes`, and the fix when it
/// is the weaker one.
fn limits_lines(s: &mut String, support: &crate::sandbox::cgroup::Support) {
    use crate::sandbox::cgroup::Support;
    let (memory, pids) = match support {
        Support::Usable {
            hierarchy,
            memory,
            pids,
        } => {
            let held: &[&str] = match (memory, pids) {
                (true, true) => &["memoryMb", "processes"],
                (true, false) => &["memoryMb"],
                _ => &["processes"],
            };
            let _ = writeln!(
                s,
                "  resource limits:       a cgroup per server of `serve` ({hierarchy}): {} \
                 bound{} each server's whole process tree (`palisade run` makes no cgroup: \
                 rlimits only)",
                held.join(" and "),
                if held.len() == 1 { "s" } else { "" }
            );
            (*memory, *pids)
        }
        Support::Unusable { reason } => {
            let _ = writeln!(
                s,
                "  resource limits:       RLIMITS ONLY: no cgroup for servers ({reason})"
            );
            (false, false)
        }
    };
    if !memory {
        let _ = writeln!(
            s,
            "      memoryMb: no memory controller, so it bounds each process, not the tree \
             (RLIMIT_DATA)"
        );
    }
    if !pids {
        let tasks = if nix::unistd::getuid().is_root() {
            "the kernel exempts uid 0 from RLIMIT_NPROC, so it is held only by `serve`'s \
             watchdog (tasks counted every 0.5 s, the server killed past the limit; `run` has \
             none)"
        } else {
            "it bounds the tasks a server adds to yours (RLIMIT_NPROC)"
        };
        let _ = writeln!(s, "      processes: no pids controller; {tasks}");
    }
    if !memory || !pids {
        let _ = writeln!(
            s,
            "      fix: run palisade in a cgroup of its own with the memory and pids \
             controllers delegated, e.g. `systemd-run --user --scope -p Delegate=yes \
             palisade serve ...` (or as root)"
        );
    }
}

/// The tier line, and what Landlock does not enforce.
fn tier_lines(s: &mut String, t: &Tier) {
    let _ = writeln!(s, "      tier: {} ({})", t.backend.name(), t.why);
    for n in &t.not_enforced {
        let _ = writeln!(s, "      not enforced by this tier: {n}");
    }
}

fn describe(s: &mut String, r: &Resolution) {
    let (head, reasons) = match r {
        Resolution::Sandboxed { plan } => (
            format!(
                "sandboxed ({}{})",
                if plan.srt {
                    "srt"
                } else if plan.landlock {
                    "Landlock"
                } else {
                    "bubblewrap"
                },
                if plan.seccomp { ", seccomp" } else { "" }
            ),
            &[][..],
        ),
        Resolution::Degraded { plan, reasons } => (
            if plan.contained() {
                "DEGRADED: runs in a weaker sandbox".to_string()
            } else {
                "DEGRADED: runs WITHOUT a sandbox".to_string()
            },
            reasons.as_slice(),
        ),
        Resolution::Refused { reasons } => {
            ("REFUSED: will not start".to_string(), reasons.as_slice())
        }
        Resolution::OptedOut => ("not sandboxed (\"sandbox\": false)".to_string(), &[][..]),
    };
    let _ = writeln!(s, "{head}");
    for reason in reasons {
        let _ = writeln!(s, "      - {}", reason.problem);
        let _ = writeln!(s, "        fix: {}", reason.fix);
    }
}
