//! The fetch: runs the machine's own npm or uv as a child process to install one package into
//! a fresh directory, then reads back what was installed (exact version, integrity, entry
//! point). Palisade implements no registry protocol itself: the user's npm/uv configuration
//! (registry, proxy, certificates, `.npmrc`, `uv.toml`) applies as it would to `npx`/`uvx`.
//!
//! Containment: the clients run in their own sandbox (`contained`): writable only the
//! directory being filled, network only the registry. npm's install scripts are off
//! (`--ignore-scripts`) unless the server's profile says the package needs them
//! (`package.installScripts`, carried in `PackageRun::install_scripts`); then they run in
//! that same sandbox (uv installs wheels and builds an sdist only when no wheel exists),
//! stdin is closed and output goes to a log (never to palisade's stdout, the MCP channel),
//! retries are few and quick (2, after 0.5 and 2 s: a registry's passing 502 is ridden out,
//! an unreachable one still fails within seconds), and a wall-clock limit kills a hung
//! client. `PALISADE_FETCH_UNCONTAINED=1` runs them unsandboxed (for machines
//! where bubblewrap cannot run), as `npx`/`uvx` would.
//!
//! Never: write into the cache entry after it is handed back (the caller moves it into
//! place), or leave a child running (every child is waited for, or killed and reaped).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::runner::{Ecosystem, PackageRun, Wanted};

/// A hung client is killed after this long.
pub const FETCH_LIMIT: Duration = Duration::from_secs(300);
/// How often a running fetch says it is still running.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Per-request timeout handed to npm (ms) and uv (s): a registry that accepts the connection
/// but never answers fails after this, not after npm's default 5 minutes.
pub(super) const REQUEST_TIMEOUT_S: u64 = 30;

/// `1` runs npm's fetch without its sandbox (for machines where bubblewrap cannot run).
pub const UNCONTAINED_ENV: &str = "PALISADE_FETCH_UNCONTAINED";

/// What was installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub version: String,
    pub integrity: String,
    /// The entry point, relative to the install directory.
    pub command: PathBuf,
}

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("`{tool}` is not installed or not in PATH (it fetches {ecosystem} packages); {hint}")]
    NoClient {
        tool: &'static str,
        ecosystem: Ecosystem,
        hint: &'static str,
    },
    #[error("`{tool}` failed ({status}) after {elapsed:.1} s:\n{output}")]
    Failed {
        tool: String,
        status: String,
        elapsed: f64,
        output: String,
    },
    #[error("`{tool}` was still running after {} s and was stopped", FETCH_LIMIT.as_secs())]
    TimedOut { tool: String },
    #[error("{0}")]
    Io(String),
    #[error("the installed package does not look as expected: {0}")]
    Layout(String),
}

/// Installs `run`'s package into `dir` (empty, in the cache), showing progress on stderr.
/// `log` receives the client's output.
pub fn install(run: &PackageRun, dir: &Path, log: &Path) -> Result<Installed, FetchError> {
    match run.ecosystem {
        Ecosystem::Npm => {
            let npm = which::which("npm").map_err(|_| FetchError::NoClient {
                tool: "npm",
                ecosystem: Ecosystem::Npm,
                hint: "install Node.js with npm",
            })?;
            let spec = match &run.wanted {
                Wanted::Latest => run.package.clone(),
                Wanted::Exact(v) | Wanted::Range(v) => format!("{}@{v}", run.package),
            };
            let args = npm_install_args(dir, &spec, run.install_scripts);
            if std::env::var_os(UNCONTAINED_ENV).is_some_and(|v| v == "1") {
                let mut cmd = Command::new(&npm);
                cmd.args(&args);
                watch(cmd, "npm install", &spec, log)?;
            } else {
                super::contained::npm(&npm, args, dir, log, &spec)?;
            }
            npm_installed(run, dir)
        }
        Ecosystem::Pypi => {
            let uv = which::which("uv").map_err(|_| FetchError::NoClient {
                tool: "uv",
                ecosystem: Ecosystem::Pypi,
                hint: "install it (`pip install uv`, or your distribution's package)",
            })?;
            let venv = dir.join("venv");
            let spec = match &run.wanted {
                Wanted::Latest => run.package.clone(),
                Wanted::Exact(v) => format!("{}=={v}", run.package),
                Wanted::Range(r) => format!("{}{r}", run.package),
            };
            let mut install: Vec<String> = vec!["pip".into(), "install".into(), "--quiet".into()];
            install.extend([
                "--python".into(),
                venv.join("bin/python").display().to_string(),
            ]);
            install.push(spec.clone());
            install.extend(run.with.iter().cloned());
            let venv_args: Vec<String> = vec![
                "venv".into(),
                "--relocatable".into(),
                "--quiet".into(),
                venv.display().to_string(),
            ];
            let quick = |cmd: &mut Command| {
                if std::env::var_os("UV_HTTP_RETRIES").is_none() {
                    cmd.env("UV_HTTP_RETRIES", "2");
                }
                if std::env::var_os("UV_HTTP_TIMEOUT").is_none() {
                    cmd.env("UV_HTTP_TIMEOUT", REQUEST_TIMEOUT_S.to_string());
                }
            };
            if std::env::var_os(UNCONTAINED_ENV).is_some_and(|v| v == "1") {
                let mut cmd = Command::new(&uv);
                cmd.args(&venv_args);
                if let Some(p) = &run.python {
                    cmd.args(["--python", p]);
                }
                let what = format!("a virtual environment for {}", run.package);
                watch(cmd, "uv venv", &what, log)?;
                let mut cmd = Command::new(&uv);
                cmd.args(&install);
                quick(&mut cmd);
                watch(cmd, "uv pip install", &spec, log)?;
            } else {
                super::contained::uv(
                    &uv,
                    run.python.as_deref(),
                    venv_args,
                    install,
                    dir,
                    log,
                    &spec,
                )?;
            }
            pypi_installed(run, dir)
        }
    }
}

/// `npm install` of `spec` into `prefix`: no audit, fund or notifier, production deps only,
/// quick retries; `--ignore-scripts` unless `scripts` (a profile's `package.installScripts`).
/// Pure.
pub fn npm_install_args(prefix: &Path, spec: &str, scripts: bool) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "install".into(),
        "--prefix".into(),
        prefix.display().to_string(),
    ];
    if !scripts {
        args.push("--ignore-scripts".into());
    }
    args.extend(
        [
            "--no-audit",
            "--no-fund",
            "--no-update-notifier",
            "--omit=dev",
            "--loglevel=error",
            "--fetch-retries=2",
            "--fetch-retry-mintimeout=500",
            "--fetch-retry-maxtimeout=2000",
        ]
        .map(String::from),
    );
    args.push(format!("--fetch-timeout={}", REQUEST_TIMEOUT_S * 1000));
    args.push(spec.to_string());
    args
}

/// Runs `cmd` (stdin closed, output to `log`), saying on stderr what it fetches and, every
/// few seconds, for how long; kills it at `FETCH_LIMIT`.
fn watch(mut cmd: Command, tool: &str, what: &str, log: &Path) -> Result<(), FetchError> {
    let io = |e: std::io::Error| FetchError::Io(format!("{tool}: {e}"));
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io)?;
    let err = out.try_clone().map_err(io)?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let started = Instant::now();
    eprintln!("palisade: fetching {what} ({tool}) into palisade's package cache...");
    let mut child = cmd.spawn().map_err(io)?;
    let mut said = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().map_err(io)? {
            break s;
        }
        if started.elapsed() > FETCH_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(FetchError::TimedOut {
                tool: tool.to_string(),
            });
        }
        if said.elapsed() >= PROGRESS_EVERY {
            said = Instant::now();
            eprintln!(
                "palisade: still fetching {what} ({:.0} s)",
                started.elapsed().as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let elapsed = started.elapsed().as_secs_f64();
    if status.success() {
        eprintln!("palisade: fetched {what} in {elapsed:.1} s");
        return Ok(());
    }
    Err(failed(tool, &status.to_string(), elapsed, log))
}

/// The error for a client that exited unsuccessfully, with the first lines of its output.
pub(super) fn failed(tool: &str, status: &str, elapsed: f64, log: &Path) -> FetchError {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    FetchError::Failed {
        tool: tool.to_string(),
        status: status.to_string(),
        elapsed,
        output: first_lines(&text, 8),
    }
}

/// The first `n` non-empty lines of a client's output, indented (the cause comes first in
/// both npm's and uv's errors; the tail is log-file boilerplate).
fn first_lines(text: &str, n: usize) -> String {
    text.lines()
        .map(str::trim_end)
        .filter(|l| {
            // Stack frames (`npm error     at ...`) say nothing to a user.
            let body = l.strip_prefix("npm error").unwrap_or(l).trim();
            !body.is_empty() && !body.starts_with("at ")
        })
        .take(n)
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn read_json(path: &Path) -> Result<serde_json::Value, FetchError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| FetchError::Layout(format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| FetchError::Layout(format!("{}: {e}", path.display())))
}

/// Version, integrity and bin of an npm install.
fn npm_installed(run: &PackageRun, dir: &Path) -> Result<Installed, FetchError> {
    let pkg_dir = Path::new("node_modules").join(&run.package);
    let manifest = read_json(&dir.join(&pkg_dir).join("package.json"))?;
    let version = manifest["version"]
        .as_str()
        .ok_or_else(|| FetchError::Layout("package.json has no version".into()))?
        .to_string();
    let key = format!("node_modules/{}", run.package);
    let integrity = read_json(&dir.join("node_modules/.package-lock.json"))
        .ok()
        .and_then(|l| {
            l["packages"][&key]["integrity"]
                .as_str()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "unknown".into());
    let bin =
        npm_bin(&run.package, run.bin.as_deref(), &manifest["bin"]).map_err(FetchError::Layout)?;
    let command = within(&pkg_dir, &bin);
    if !command.as_ref().is_some_and(|c| dir.join(c).is_file()) {
        return Err(FetchError::Layout(format!(
            "{} declares bin {} which is not a file in the package",
            run.package, bin
        )));
    }
    let command = command.unwrap_or_default();
    make_executable(&dir.join(&command))?;
    Ok(Installed {
        version,
        integrity,
        command,
    })
}

/// `base/rel` with `.` and `..` applied, or `None` when it leaves `base` or is absolute.
/// Pure.
fn within(base: &Path, rel: &str) -> Option<PathBuf> {
    use std::path::Component;
    let mut out = base.to_path_buf();
    for c in Path::new(rel).components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir if out != base => {
                out.pop();
            }
            _ => return None,
        }
    }
    (out != base).then_some(out)
}

/// npm marks bin files executable when it links them; make sure, since the entry is read-only
/// once in place.
fn make_executable(file: &Path) -> Result<(), FetchError> {
    use std::os::unix::fs::PermissionsExt;
    let meta =
        std::fs::metadata(file).map_err(|e| FetchError::Io(format!("{}: {e}", file.display())))?;
    let mode = meta.permissions().mode();
    if mode & 0o111 != 0o111 {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode | 0o755))
            .map_err(|e| FetchError::Io(format!("{}: {e}", file.display())))?;
    }
    Ok(())
}

/// The bin file `npx` would run: the one named, else the only one, else the one named like
/// the package (without its scope). Pure.
pub fn npm_bin(
    package: &str,
    wanted: Option<&str>,
    bin: &serde_json::Value,
) -> Result<String, String> {
    let unscoped = package.rsplit('/').next().unwrap_or(package);
    let map: Vec<(String, String)> = match bin {
        serde_json::Value::String(s) => vec![(unscoped.to_string(), s.clone())],
        serde_json::Value::Object(m) => m
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
            .collect(),
        _ => Vec::new(),
    };
    let names = || {
        map.iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let pick = match wanted {
        Some(w) => map.iter().find(|(k, _)| k == w),
        None if map.len() == 1 => map.first(),
        None => map.iter().find(|(k, _)| k == unscoped),
    };
    match pick {
        Some((_, path)) => Ok(path.clone()),
        None if map.is_empty() => Err(format!(
            "{package} declares no bin: it cannot be run with npx"
        )),
        None => Err(format!(
            "{package} has several bins ({}); say which with `npx -p {package} BIN`",
            names()
        )),
    }
}

/// PyPI's `[-_.]+` to `_`, lower case (the dist-info directory's spelling).
fn normalize(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('_') {
                out.push('_');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Version, integrity and console script of a uv install.
fn pypi_installed(run: &PackageRun, dir: &Path) -> Result<Installed, FetchError> {
    let bare = run.package.split('[').next().unwrap_or(&run.package);
    let want = normalize(bare);
    let lib = dir.join("venv/lib");
    let layout = |m: String| FetchError::Layout(m);
    let mut found = None;
    for py in std::fs::read_dir(&lib).map_err(|e| layout(format!("{}: {e}", lib.display())))? {
        let site = py
            .map_err(|e| layout(e.to_string()))?
            .path()
            .join("site-packages");
        let Ok(entries) = std::fs::read_dir(&site) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".dist-info") else {
                continue;
            };
            if let Some((n, v)) = stem.split_once('-') {
                if normalize(n) == want {
                    found = Some((v.to_string(), e.path()));
                }
            }
        }
    }
    let (version, dist_info) =
        found.ok_or_else(|| layout(format!("no {bare}-*.dist-info in {}", lib.display())))?;
    let record = std::fs::read(dist_info.join("RECORD"))
        .map_err(|e| layout(format!("{}/RECORD: {e}", dist_info.display())))?;
    let integrity = format!("sha256-record:{}", hex::encode(Sha256::digest(&record)));
    let script = run.bin.clone().unwrap_or_else(|| bare.to_string());
    let command = Path::new("venv/bin").join(&script);
    if script.contains('/') || !dir.join(&command).is_file() {
        let mut have: Vec<String> = std::fs::read_dir(dir.join("venv/bin"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| {
                        !n.starts_with("python")
                            && !n.starts_with("activate")
                            && !n.starts_with("pydoc")
                            && n != "deactivate.bat"
                    })
                    .collect()
            })
            .unwrap_or_default();
        have.sort();
        return Err(layout(format!(
            "{} has no command `{script}` (it has: {}); name one with `uvx --from {} COMMAND`",
            run.package,
            have.join(", "),
            run.package
        )));
    }
    Ok(Installed {
        version,
        integrity,
        command,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn npm_bin_picks_the_named_the_only_or_the_unscoped_name() {
        assert_eq!(
            npm_bin("@s/x", None, &json!("dist/i.js")).unwrap(),
            "dist/i.js"
        );
        assert_eq!(
            npm_bin("@s/x", None, &json!({"mcp-x": "a.js"})).unwrap(),
            "a.js"
        );
        let two = json!({"x": "x.js", "y": "y.js"});
        assert_eq!(npm_bin("@s/x", None, &two).unwrap(), "x.js");
        assert_eq!(npm_bin("@s/x", Some("y"), &two).unwrap(), "y.js");
        let err = npm_bin("@s/z", None, &two).unwrap_err();
        assert!(err.contains("several bins (x, y)"), "{err}");
        assert!(npm_bin("a", None, &json!(null))
            .unwrap_err()
            .contains("no bin"));
    }

    #[test]
    fn bin_paths_stay_inside_the_package() {
        let base = Path::new("node_modules/x");
        assert_eq!(
            within(base, "./dist/../bin/i.js").unwrap(),
            Path::new("node_modules/x/bin/i.js")
        );
        assert_eq!(within(base, "../../etc/passwd"), None);
        assert_eq!(within(base, "/etc/passwd"), None);
        assert_eq!(within(base, "."), None);
    }

    #[test]
    fn pypi_names_normalize_like_dist_info_directories() {
        assert_eq!(normalize("mcp-server-time"), "mcp_server_time");
        assert_eq!(normalize("Foo.Bar__baz"), "foo_bar_baz");
    }

    #[test]
    fn npm_install_ignores_scripts_unless_asked() {
        let off = npm_install_args(Path::new("/c/npm/.fetch-1"), "x@1.0.0", false);
        assert_eq!(
            off,
            [
                "install",
                "--prefix",
                "/c/npm/.fetch-1",
                "--ignore-scripts",
                "--no-audit",
                "--no-fund",
                "--no-update-notifier",
                "--omit=dev",
                "--loglevel=error",
                "--fetch-retries=2",
                "--fetch-retry-mintimeout=500",
                "--fetch-retry-maxtimeout=2000",
                "--fetch-timeout=30000",
                "x@1.0.0",
            ]
        );
        let on = npm_install_args(Path::new("/c/npm/.fetch-1"), "x@1.0.0", true);
        assert!(!on.iter().any(|a| a.contains("scripts")), "{on:?}");
        assert_eq!(on.len(), off.len() - 1);
        assert_eq!(on.last().map(String::as_str), Some("x@1.0.0"));
    }

    #[test]
    fn client_output_keeps_the_cause_lines_first() {
        let text =
            "\nnpm error code ECONNREFUSED\nnpm error     at x (y.js:1)\nnpm error errno E\n\n";
        assert_eq!(
            first_lines(text, 2),
            "    npm error code ECONNREFUSED\n    npm error errno E"
        );
    }
}
