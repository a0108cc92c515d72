//! The npm fetch in its own sandbox: `npm install` runs under bubblewrap (through
//! `sandbox::launch`, as a server would) whose only writable place is the directory being
//! filled, whose only network is the registry's host through palisade's egress proxy, and
//! which reads the user's `~/.npmrc` (registry, auth) read-only and nothing else of HOME.
//! npm's own download cache is private to the fetch (inside the directory, removed after).
//! When a profile turns npm's install scripts on (`package.installScripts`), they run here
//! too: the sandbox is the same, only npm's argv lacks `--ignore-scripts`; HOME and `/tmp`
//! they may write are the sandbox's own (tmpfs, or scratch directories removed afterwards).
//!
//! Pure part: the registry's host from its URL (`registry_host`). The rest starts a proxy
//! and a sandbox and waits for them; every child is reaped, the proxy's socket directory
//! removed.
//!
//! Never: fall back to an unsandboxed npm when the sandbox cannot be set up (the fetch fails
//! with the launcher's reason instead).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::config::{DomainLists, NetworkConfig, SandboxPolicy};
use crate::sandbox::capabilities::{self, Depth};
use crate::sandbox::launch::{self, EgressSocket, Grant, LaunchRequest};
use crate::sandbox::{Access, ResourceLimits};

use super::fetch::{FetchError, FETCH_LIMIT};

/// npm's default registry.
pub const DEFAULT_REGISTRY: &str = "https://registry.npmjs.org/";

/// The egress allowlist entry for a registry URL: `host` for http(s) on the default ports,
/// `host:port` otherwise; `None` for what is not an http(s) URL. Pure.
pub fn registry_host(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "https" => 443,
        "http" => 80,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    if authority.is_empty() || authority.starts_with('[') {
        return None;
    }
    let host = match authority.split_once(':') {
        Some((h, p)) if p.parse::<u16>().ok()? == default_port => h.to_string(),
        Some(_) => authority.to_string(),
        None => authority.to_string(),
    };
    Some(host.to_ascii_lowercase())
}

/// The registry's allowlist entry plus each address it resolves to here: the proxy refuses
/// names resolving to reserved addresses (a mirror on a private or test network) unless the
/// address itself is allowed, and the registry npm is configured with is the one to reach.
fn with_addresses(host: String) -> Vec<String> {
    use std::net::{IpAddr, ToSocketAddrs};
    let (name, port) = match host.rsplit_once(':') {
        Some((n, p)) => (n.to_string(), p.parse::<u16>().ok()),
        None => (host.clone(), None),
    };
    let mut out = vec![host];
    let Ok(addrs) = (name.as_str(), port.unwrap_or(443)).to_socket_addrs() else {
        return out;
    };
    for a in addrs {
        let ip = match a.ip() {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        };
        let entry = match port {
            Some(p) => format!("{ip}:{p}"),
            None => ip,
        };
        if !out.contains(&entry) {
            out.push(entry);
        }
    }
    out
}

/// The registry npm would use here: `npm_config_registry`, else `npm config get registry`
/// (which reads the user's and the global npmrc), else the default.
fn registry(npm: &Path) -> String {
    for k in ["npm_config_registry", "NPM_CONFIG_REGISTRY"] {
        if let Ok(v) = std::env::var(k) {
            if !v.is_empty() {
                return v;
            }
        }
    }
    std::process::Command::new(npm)
        .args(["config", "get", "registry"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_REGISTRY.to_string())
}

/// Runs `npm ARGS` (an install into `dir`) in the fetch sandbox; its output goes to `log`.
pub fn npm(
    npm: &Path,
    args: Vec<String>,
    dir: &Path,
    log: &Path,
    what: &str,
) -> Result<(), FetchError> {
    let registry = registry(npm);
    let req = fetch_request(npm, args, dir, &registry)?;
    let outcome = run_in_sandbox(req, log, what);
    let _ = std::fs::remove_dir_all(dir.join(".npm-cache"));
    outcome
}

/// The index uv would use here: `UV_DEFAULT_INDEX`, `UV_INDEX_URL`, else PyPI.
fn index() -> String {
    ["UV_DEFAULT_INDEX", "UV_INDEX_URL"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "https://pypi.org/simple".to_string())
}

/// The base interpreter uv would build the venv from (`uv python find`, then that Python's own
/// `sys._base_executable` and `sys.base_prefix`, so that a venv or a shim on PATH leads to the
/// real installation). Both found on the host, before the sandbox.
fn base_python(uv: &Path, wanted: Option<&str>) -> Result<(PathBuf, PathBuf), FetchError> {
    let run = |cmd: &mut std::process::Command| {
        cmd.stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
    };
    let mut find = std::process::Command::new(uv);
    find.args(["python", "find"])
        .env("UV_PYTHON_DOWNLOADS", "never");
    if let Some(w) = wanted {
        find.arg(w);
    }
    let found = run(&mut find)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            FetchError::Io(format!(
                "uv finds no Python{} on this machine; install one",
                wanted.map(|w| format!(" {w}")).unwrap_or_default()
            ))
        })?;
    let text = run(std::process::Command::new(&found).args([
        "-c",
        "import sys; print(getattr(sys, '_base_executable', sys.executable)); print(sys.base_prefix)",
    ]))
    .ok_or_else(|| FetchError::Io(format!("{found} does not run")))?;
    let mut lines = text.lines();
    match (lines.next(), lines.next()) {
        (Some(exe), Some(prefix)) => Ok((PathBuf::from(exe), PathBuf::from(prefix))),
        _ => Err(FetchError::Io(format!(
            "{found} did not say where it is installed"
        ))),
    }
}

/// Creates the venv and installs into it (`uv venv`, `uv pip install`), each in the fetch
/// sandbox. `venv_args` get `--python BASE` appended; `install_args` run as given.
pub fn uv(
    uv: &Path,
    python: Option<&str>,
    venv_args: Vec<String>,
    install_args: Vec<String>,
    dir: &Path,
    log: &Path,
    what: &str,
) -> Result<(), FetchError> {
    let index = index();
    let (exe, prefix) = base_python(uv, python)?;
    let home = (!prefix.starts_with("/usr")).then_some(prefix.as_path());
    let mut venv_args = venv_args;
    venv_args.extend(["--python".to_string(), exe.display().to_string()]);
    let outcome = uv_request(uv, venv_args, dir, &index, home)
        .and_then(|req| run_in_sandbox(req, log, &format!("a virtual environment for {what}")))
        .and_then(|()| uv_request(uv, install_args, dir, &index, home))
        .and_then(|req| run_in_sandbox(req, log, what));
    let _ = std::fs::remove_dir_all(dir.join(".uv-cache"));
    outcome
}

/// The fetch sandbox for `npm ARGS` installing into `dir` from `registry`: `dir` is the only
/// read-write grant (npm's download cache goes inside it), `~/.npmrc` and the machine's CA
/// files the only read-only ones, the registry's host (and the addresses it resolves to)
/// the only network; no profile, enforce.
pub fn fetch_request(
    npm: &Path,
    args: Vec<String>,
    dir: &Path,
    registry: &str,
) -> Result<LaunchRequest, FetchError> {
    let host = registry_host(registry).ok_or_else(|| {
        FetchError::Io(format!(
            "the npm registry `{registry}` is not an http(s) URL; the fetch sandbox reaches registries over HTTP(S) only"
        ))
    })?;
    let mut env = BTreeMap::new();
    // npm's environment configuration is the user's; the registry and cache are set here.
    for (k, v) in std::env::vars() {
        if k.to_ascii_lowercase().starts_with("npm_config_") {
            env.insert(k, v);
        }
    }
    env.insert("npm_config_registry".into(), registry.to_string());
    env.insert(
        "npm_config_cache".into(),
        dir.join(".npm-cache").display().to_string(),
    );
    env.insert("npm_config_update_notifier".into(), "false".into());
    let read = home_file(".npmrc").into_iter().collect();
    let by_port = args.iter().any(|a| a == "--ignore-scripts");
    Ok(sandbox_request(FetchSandbox {
        command: npm,
        args,
        dir,
        hosts: vec![host],
        env,
        read,
        by_port,
    }))
}

/// The fetch sandbox for `uv ARGS` filling `dir` from `index` (PyPI's files host added for
/// PyPI itself): as npm's, with uv's cache inside `dir`, Python downloads off, the user's
/// `UV_*` settings and `uv.toml`, and the interpreter's installation (`python_home`) readable.
pub fn uv_request(
    uv: &Path,
    args: Vec<String>,
    dir: &Path,
    index: &str,
    python_home: Option<&Path>,
) -> Result<LaunchRequest, FetchError> {
    let host = registry_host(index).ok_or_else(|| {
        FetchError::Io(format!(
            "the package index `{index}` is not an http(s) URL; the fetch sandbox reaches indexes over HTTP(S) only"
        ))
    })?;
    let mut hosts = vec![host];
    if hosts[0] == "pypi.org" {
        hosts.push("files.pythonhosted.org".into());
    }
    let mut env = BTreeMap::new();
    for (k, v) in std::env::vars() {
        if k.starts_with("UV_") {
            env.insert(k, v);
        }
    }
    env.insert(
        "UV_CACHE_DIR".into(),
        dir.join(".uv-cache").display().to_string(),
    );
    env.insert("UV_PYTHON_DOWNLOADS".into(), "never".into());
    // Two quick retries (a registry's passing 5xx), then fail, unless the user chose otherwise.
    env.entry("UV_HTTP_RETRIES".into())
        .or_insert_with(|| "2".into());
    env.entry("UV_HTTP_TIMEOUT".into())
        .or_insert_with(|| super::fetch::REQUEST_TIMEOUT_S.to_string());
    let mut read: Vec<PathBuf> = home_file(".config/uv/uv.toml").into_iter().collect();
    read.extend(python_home.map(Path::to_path_buf));
    Ok(sandbox_request(FetchSandbox {
        command: uv,
        args,
        dir,
        hosts,
        env,
        read,
        // uv builds a package that has no wheel from source (its build backend's code);
        // accepted as uv's own, and said in docs/security.md.
        by_port: true,
    }))
}

/// `$HOME/rel` when it is a file.
fn home_file(rel: &str) -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(rel))
        .filter(|p| p.is_file())
}

/// What one fetch sandbox is made of.
struct FetchSandbox<'a> {
    command: &'a Path,
    args: Vec<String>,
    /// The only writable place (and the working directory).
    dir: &'a Path,
    /// The only network: these hosts, through the egress proxy.
    hosts: Vec<String>,
    env: BTreeMap<String, String>,
    /// Read-only grants besides the system base and the command's own closure.
    read: Vec<PathBuf>,
    /// Whether an allowlist held by port only (the Landlock tier's) is accepted: not when
    /// npm runs a package's install scripts, third-party code beside the registry token.
    by_port: bool,
}

fn sandbox_request(f: FetchSandbox<'_>) -> LaunchRequest {
    let mut env = f.env;
    let mut grants = vec![Grant {
        path: f.dir.to_path_buf(),
        access: Access::Rw,
    }];
    grants.extend(f.read.into_iter().map(|path| Grant {
        path,
        access: Access::Ro,
    }));
    // The machine's TLS trust (a corporate or test CA) as the user's client sees it.
    for k in ["NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR"] {
        let Some(v) = std::env::var_os(k).map(PathBuf::from) else {
            continue;
        };
        if !v.is_absolute() || !v.exists() {
            continue;
        }
        env.insert(k.to_string(), v.display().to_string());
        if !v.starts_with("/etc/ssl") && !v.starts_with("/usr") {
            grants.push(Grant {
                path: v,
                access: Access::Ro,
            });
        }
    }
    LaunchRequest {
        name: "package-fetch".into(),
        command: f.command.display().to_string(),
        args: f.args,
        env,
        cwd: Some(f.dir.to_path_buf()),
        grants,
        network: NetworkConfig::Allowlist(DomainLists {
            allowed_domains: f.hosts.into_iter().flat_map(with_addresses).collect(),
            denied_domains: Vec::new(),
        }),
        policy: SandboxPolicy::Enforce,
        // Under Landlock (a container), the registry allowlist holds by port only: accepted
        // here for the user's own npm or uv (docs/security.md, package fetches), not when
        // npm runs a package's install scripts.
        allowlist_by_port: f.by_port,
        profile: Some("none".into()),
        limits: ResourceLimits {
            cgroup: false,
            ..Default::default()
        },
        ..LaunchRequest::default()
    }
}

/// Runs `req` (a fetch request) to its end with its egress proxy, output to `log`, progress
/// on stderr; kills it at `FETCH_LIMIT`. Starts its own runtime: call it outside one.
pub fn run_in_sandbox(req: LaunchRequest, log: &Path, what: &str) -> Result<(), FetchError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| FetchError::Io(format!("cannot start the fetch's runtime: {e}")))?;
    let outcome = rt.block_on(run_sandboxed(req, log, what));
    rt.shutdown_timeout(Duration::from_millis(200));
    outcome
}

async fn run_sandboxed(mut req: LaunchRequest, log: &Path, what: &str) -> Result<(), FetchError> {
    let mut egress = crate::gateway::network::start_in_temp(crate::egress::Resolver::system())
        .map_err(|e| FetchError::Io(format!("the fetch's egress proxy did not start: {e}")))?;
    if let NetworkConfig::Allowlist(lists) = &req.network {
        let socket = egress
            .proxy
            .add_server(&req.name, lists)
            .map_err(|e| FetchError::Io(format!("the fetch's egress proxy: {e}")))?;
        req.egress = EgressSocket::Ready(socket);
    }
    let caps = capabilities::probe(Depth::Full);
    crate::gateway::network::open_loopback(&egress.proxy, &req.name.clone(), &mut req, &caps);
    let io = |e: std::io::Error| FetchError::Io(format!("{} (sandboxed): {e}", req.command));
    let result = async {
        let mut prepared = launch::prepare_with(&req, &caps)
            .map_err(|e| FetchError::Io(format!("the fetch sandbox cannot be set up: {e}")))?;
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(io)?;
        let err = out.try_clone().map_err(io)?;
        let started = Instant::now();
        eprintln!("palisade: fetching {what} (sandboxed) into palisade's package cache...");
        let mut child = prepared
            .command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(io)?;
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        tick.tick().await;
        let status = loop {
            tokio::select! {
                s = child.wait() => break s.map_err(io)?,
                _ = tick.tick() => {
                    if started.elapsed() > FETCH_LIMIT {
                        let _ = child.kill().await;
                        return Err(FetchError::TimedOut { tool: req.command.clone() });
                    }
                    eprintln!("palisade: still fetching {what} ({:.0} s)", started.elapsed().as_secs_f64());
                }
            }
        };
        drop(prepared);
        let elapsed = started.elapsed().as_secs_f64();
        if status.success() {
            eprintln!("palisade: fetched {what} in {elapsed:.1} s");
            return Ok(());
        }
        Err(super::fetch::failed(&format!("{} {} (sandboxed)", req.command, req.args.first().map(String::as_str).unwrap_or("")), &status.to_string(), elapsed, log))
    }
    .await;
    egress.shutdown();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_hosts_for_the_egress_allowlist() {
        assert_eq!(
            registry_host("https://registry.npmjs.org/").as_deref(),
            Some("registry.npmjs.org")
        );
        assert_eq!(
            registry_host("https://npm.corp.example:443/npm/").as_deref(),
            Some("npm.corp.example")
        );
        assert_eq!(
            registry_host("http://user:pw@127.0.0.1:9/").as_deref(),
            Some("127.0.0.1:9")
        );
        assert_eq!(registry_host("file:///srv/npm"), None);
        assert_eq!(registry_host("registry.npmjs.org"), None);
    }
}
