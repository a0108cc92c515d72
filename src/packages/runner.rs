//! Reads a package runner's command line (`npx -y PKG ARGS`, `npm exec`, `uvx PKG ARGS`,
//! `uv tool run`, `pipx run`) into what it would fetch and run, and recognises container
//! runtimes (`docker run ...`) that no sandbox of palisade's can contain. Pure: no I/O.
//!
//! Only the runner's own options that decide *what* runs are understood; an option this
//! module does not know makes the whole line `Unsupported` (with the option named), never a
//! guess: a misread line would run another package than the user wrote.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Which registry a package comes from, and so which client fetches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ecosystem {
    /// The npm registry, fetched with `npm install`.
    Npm,
    /// PyPI (or the index uv is configured with), fetched with `uv pip install`.
    Pypi,
}

impl Ecosystem {
    /// The directory name under the cache and the prefix of lock keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Ecosystem::Npm => "npm",
            Ecosystem::Pypi => "pypi",
        }
    }
}

impl std::fmt::Display for Ecosystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The version the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Wanted {
    /// No version (or `latest`): the lock decides after the first fetch.
    Latest,
    /// One exact version (`PKG@1.2.3`, `PKG==1.2.3`).
    Exact(String),
    /// Anything else the registry resolves (`PKG@^1`, `PKG>=2`), as written.
    Range(String),
}

/// One package run, as the runner would do it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageRun {
    pub ecosystem: Ecosystem,
    /// The runner as written (`npx`, `uvx`, ...), for messages.
    pub runner: String,
    /// The package name, without version (PyPI extras included: `pkg[cli]`).
    pub package: String,
    pub wanted: Wanted,
    /// The command to run when the line names it apart from the package (`npx -p PKG BIN`,
    /// `uvx --from PKG CMD`); otherwise the package's default entry point.
    pub bin: Option<String>,
    /// Further packages installed beside it (`uvx --with X`), as written.
    pub with: Vec<String>,
    /// The interpreter asked for (`uvx --python 3.12`).
    pub python: Option<String>,
    /// The server's own arguments.
    pub args: Vec<String>,
    /// Whether the fetch runs the package's install scripts (npm). Never set from the
    /// command line: false here, and only a profile's `package.installScripts` turns it on
    /// (`hooks::install_scripts`).
    pub install_scripts: bool,
}

/// What a command line is, as far as this module is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launcher {
    /// Not a package runner nor a container runtime: launched as written.
    Plain,
    /// A package runner line palisade fetches ahead and rewrites.
    Package(PackageRun),
    /// `docker run` and the like: the server runs in a daemon's container, out of reach.
    Container { runtime: String },
    /// A package runner line this module cannot read safely; why.
    Unsupported { runner: String, why: String },
    /// A package runner line that names no package (`npx -y` alone): it cannot run a server.
    NoPackage { runner: String },
}

/// Why a runner line is read as naming no package.
const NO_PACKAGE: &str = "no package named";

/// What a server whose runner line names no package is told (its `args` field named).
pub fn no_package_reason(runner: &str, args_field: &str) -> String {
    format!(
        "`{runner}` names no package to run: give it after the runner's options in \
         {args_field} (e.g. `npx -y @modelcontextprotocol/server-memory`)"
    )
}

/// Classifies `command args...`.
pub fn classify(command: &str, args: &[String]) -> Launcher {
    let name = Path::new(command)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(command);
    let unsupported = |why: String| Launcher::Unsupported {
        runner: name.to_string(),
        why,
    };
    let result = match name {
        "npx" => npm_exec(name, args),
        "npm" => match args.split_first() {
            Some((sub, rest)) if sub == "exec" || sub == "x" => npm_exec("npm exec", rest),
            _ => return Launcher::Plain,
        },
        "uvx" => uv_tool_run(name, args),
        "uv" => match args {
            [tool, run, rest @ ..] if tool == "tool" && run == "run" => {
                uv_tool_run("uv tool run", rest)
            }
            [x, rest @ ..] if x == "x" => uv_tool_run("uv x", rest),
            _ => return Launcher::Plain,
        },
        "pipx" => match args.split_first() {
            Some((sub, rest)) if sub == "run" => pipx_run(rest),
            _ => return Launcher::Plain,
        },
        "docker" | "podman" | "nerdctl" => {
            let positional: Vec<&str> = args
                .iter()
                .map(String::as_str)
                .filter(|a| !a.starts_with('-'))
                .take(2)
                .collect();
            return match positional.as_slice() {
                ["run", ..] | ["container", "run"] => Launcher::Container {
                    runtime: name.to_string(),
                },
                _ => Launcher::Plain,
            };
        }
        _ => return Launcher::Plain,
    };
    match result {
        Ok(run) => Launcher::Package(run),
        Err(why) if why == NO_PACKAGE => Launcher::NoPackage {
            runner: name.to_string(),
        },
        Err(why) => unsupported(why),
    }
}

/// `npx [opts] PKG[@VER] ARGS` / `npm exec [opts] [--] PKG ARGS` / `-p PKG BIN ARGS`.
fn npm_exec(runner: &str, args: &[String]) -> Result<PackageRun, String> {
    let mut package: Option<String> = None;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "-y" | "--yes" | "--no-install" | "-q" | "--quiet" | "--silent" | "--prefer-online"
            | "--prefer-offline" => {}
            "--" => {
                i += 1;
                break;
            }
            "-p" | "--package" => {
                let v = args
                    .get(i + 1)
                    .ok_or_else(|| format!("`{a}` needs a package"))?;
                if package.replace(v.clone()).is_some() {
                    return Err("more than one --package is not supported".into());
                }
                i += 1;
            }
            _ if a.starts_with("--package=") => {
                let v = &a["--package=".len()..];
                if package.replace(v.to_string()).is_some() {
                    return Err("more than one --package is not supported".into());
                }
            }
            _ if a.starts_with('-') => return Err(format!("option `{a}` is not understood")),
            _ => break,
        }
        i += 1;
    }
    let Some((first, rest)) = args.get(i..).and_then(<[String]>::split_first) else {
        return Err(NO_PACKAGE.into());
    };
    let (spec, bin) = match package {
        Some(p) => (p, Some(first.clone())),
        None => (first.clone(), None),
    };
    let (name, wanted) = npm_spec(&spec)?;
    Ok(PackageRun {
        ecosystem: Ecosystem::Npm,
        runner: runner.to_string(),
        package: name,
        wanted,
        bin,
        with: Vec::new(),
        python: None,
        args: rest.to_vec(),
        install_scripts: false,
    })
}

/// `name`, `name@ver`, `@scope/name@ver`; refuses URLs, paths, git and aliases.
pub fn npm_spec(spec: &str) -> Result<(String, Wanted), String> {
    let (name, version) = match spec.get(1..).and_then(|s| s.rfind('@')) {
        Some(at) => (&spec[..at + 1], Some(&spec[at + 2..])),
        None => (spec, None),
    };
    let scoped_ok = match name.strip_prefix('@') {
        Some(rest) => {
            matches!(rest.split_once('/'), Some((s, n)) if npm_name_ok(s) && npm_name_ok(n))
        }
        None => npm_name_ok(name),
    };
    if !scoped_ok {
        return Err(format!(
            "`{spec}` is not a registry package name (paths, URLs, git and aliases are not fetched ahead)"
        ));
    }
    let wanted = match version {
        None | Some("latest") | Some("") => Wanted::Latest,
        Some(v) if is_exact_semver(v) => Wanted::Exact(v.to_string()),
        Some(v) if v.contains(':') || v.contains('/') => {
            return Err(format!("`{spec}`: version `{v}` is not a registry version"))
        }
        Some(v) => Wanted::Range(v.to_string()),
    };
    Ok((name.to_string(), wanted))
}

fn npm_name_ok(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('.')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~'))
}

/// `1.2.3`, `1.2.3-rc.1`, `1.2.3+build`.
fn is_exact_semver(v: &str) -> bool {
    let core = v.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

/// `uvx [opts] PKG[@VER|==VER] ARGS`, `--from SPEC CMD`, `--with X`, `--python X`.
fn uv_tool_run(runner: &str, args: &[String]) -> Result<PackageRun, String> {
    let mut from: Option<String> = None;
    let mut with = Vec::new();
    let mut python = None;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let value = |i: usize| {
            args.get(i + 1)
                .cloned()
                .ok_or_else(|| format!("`{a}` needs a value"))
        };
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (a, None),
        };
        let take = |i: &mut usize| match &inline {
            Some(v) => Ok(v.clone()),
            None => {
                let v = value(*i);
                *i += 1;
                v
            }
        };
        match key {
            "-q" | "--quiet" | "--isolated" | "--no-progress" => {}
            "--from" => from = Some(take(&mut i)?),
            "--with" | "-w" => with.push(take(&mut i)?),
            "--python" | "-p" => python = Some(take(&mut i)?),
            "--" => {
                i += 1;
                break;
            }
            _ if a.starts_with('-') => return Err(format!("option `{a}` is not understood")),
            _ => break,
        }
        i += 1;
    }
    let Some((first, rest)) = args.get(i..).and_then(<[String]>::split_first) else {
        return Err(NO_PACKAGE.into());
    };
    let (spec, bin) = match from {
        Some(f) => (f, Some(first.clone())),
        None => (first.clone(), None),
    };
    let (package, wanted) = pypi_spec(&spec)?;
    // `uvx pkg[extra]` runs the command `pkg`.
    let bin = bin.or_else(|| package.split_once('[').map(|(name, _)| name.to_string()));
    Ok(PackageRun {
        ecosystem: Ecosystem::Pypi,
        runner: runner.to_string(),
        package,
        wanted,
        bin,
        with,
        python,
        args: rest.to_vec(),
        install_scripts: false,
    })
}

/// `pipx run [--spec SPEC] [--python X] APP ARGS`.
fn pipx_run(args: &[String]) -> Result<PackageRun, String> {
    let mut spec = None;
    let mut python = None;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "--spec" | "--python" => {
                let v = args
                    .get(i + 1)
                    .cloned()
                    .ok_or_else(|| format!("`{a}` needs a value"))?;
                if a == "--spec" {
                    spec = Some(v);
                } else {
                    python = Some(v);
                }
                i += 1;
            }
            "--" => {
                i += 1;
                break;
            }
            _ if a.starts_with('-') => return Err(format!("option `{a}` is not understood")),
            _ => break,
        }
        i += 1;
    }
    let Some((first, rest)) = args.get(i..).and_then(<[String]>::split_first) else {
        return Err(NO_PACKAGE.into());
    };
    let mut run = uv_tool_run("pipx run", std::slice::from_ref(first))?;
    if let Some(s) = spec {
        let (package, wanted) = pypi_spec(&s)?;
        run.package = package;
        run.wanted = wanted;
        run.bin = Some(first.clone());
    }
    run.runner = "pipx run".into();
    run.python = python;
    run.args = rest.to_vec();
    Ok(run)
}

/// `name`, `name[extra]`, `name@1.2`, `name==1.2`, `name>=1`; refuses URLs and paths.
pub fn pypi_spec(spec: &str) -> Result<(String, Wanted), String> {
    let cut = spec
        .find(['@', '=', '<', '>', '!', '~', ';', ' '])
        .unwrap_or(spec.len());
    let (name, version) = spec.split_at(cut);
    let bare = name.split('[').next().unwrap_or("");
    let extras_ok = match name.find('[') {
        None => true,
        Some(i) => name.ends_with(']') && !name[i + 1..name.len() - 1].contains(['[', ']']),
    };
    let name_ok = !bare.is_empty()
        && bare
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !name_ok || !extras_ok || version.contains("://") || version.contains(';') {
        return Err(format!(
            "`{spec}` is not a package index name (paths, URLs and markers are not fetched ahead)"
        ));
    }
    let wanted = if let Some(v) = version.strip_prefix('@') {
        match v {
            "latest" | "" => Wanted::Latest,
            v => Wanted::Exact(v.to_string()),
        }
    } else if let Some(v) = version.strip_prefix("==") {
        if v.is_empty() || v.contains([',', '*']) {
            Wanted::Range(version.to_string())
        } else {
            Wanted::Exact(v.to_string())
        }
    } else if version.is_empty() {
        Wanted::Latest
    } else {
        Wanted::Range(version.to_string())
    };
    Ok((name.to_string(), wanted))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn pkg(cmd: &str, args: &str) -> PackageRun {
        match classify(cmd, &argv(args)) {
            Launcher::Package(p) => p,
            other => panic!("{cmd} {args}: {other:?}"),
        }
    }

    #[test]
    fn npx_yes_scoped_package_with_the_servers_arguments() {
        let p = pkg(
            "npx",
            "-y @modelcontextprotocol/server-filesystem /home/me/project",
        );
        assert_eq!(p.ecosystem, Ecosystem::Npm);
        assert_eq!(p.package, "@modelcontextprotocol/server-filesystem");
        assert_eq!(p.wanted, Wanted::Latest);
        assert_eq!(p.bin, None);
        assert_eq!(p.args, ["/home/me/project"]);
    }

    #[test]
    fn npx_versions_exact_range_and_latest() {
        let p = pkg("/usr/bin/npx", "--yes @scope/x@1.2.3 --flag");
        assert_eq!(
            (p.package.as_str(), &p.wanted),
            ("@scope/x", &Wanted::Exact("1.2.3".into()))
        );
        assert_eq!(
            p.args,
            ["--flag"],
            "options after the package are the server's"
        );
        assert_eq!(pkg("npx", "-y x@^2").wanted, Wanted::Range("^2".into()));
        assert_eq!(pkg("npx", "-y x@latest").wanted, Wanted::Latest);
        assert_eq!(pkg("npx", "x").package, "x");
    }

    #[test]
    fn npm_exec_and_package_option_name_the_bin_apart() {
        let p = pkg("npm", "exec --yes --package=@a/b@1.0.0 -- tool --x");
        assert_eq!(p.package, "@a/b");
        assert_eq!(p.bin.as_deref(), Some("tool"));
        assert_eq!(p.args, ["--x"]);
        let p = pkg("npm", "exec -- @a/b arg");
        assert_eq!((p.package.as_str(), p.bin), ("@a/b", None));
        let p = pkg("npx", "-p pkg@2.0.0 cmd");
        assert_eq!(p.wanted, Wanted::Exact("2.0.0".into()));
        assert_eq!(p.bin.as_deref(), Some("cmd"));
    }

    #[test]
    fn a_runner_line_with_no_package_is_told_apart() {
        for (cmd, args) in [
            ("npx", "-y"),
            ("npx", ""),
            ("uvx", ""),
            ("npm", "exec --yes"),
        ] {
            assert!(
                matches!(classify(cmd, &argv(args)), Launcher::NoPackage { .. }),
                "{cmd} {args}"
            );
        }
        let why = no_package_reason("npx", "mcpServers.mem.args");
        assert!(why.contains("mcpServers.mem.args"), "{why}");
    }

    #[test]
    fn npm_specs_that_are_not_registry_packages_are_refused() {
        for bad in [
            "./local",
            "github:user/repo",
            "https://x/y.tgz",
            "a@npm:b",
            "@scope",
        ] {
            assert!(
                matches!(
                    classify("npx", &argv(&format!("-y {bad}"))),
                    Launcher::Unsupported { .. }
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn unknown_runner_options_are_refused_not_guessed() {
        match classify("npx", &argv("--registry http://x -y pkg")) {
            Launcher::Unsupported { why, .. } => assert!(why.contains("--registry"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn uvx_and_uv_tool_run_with_versions_from_with_and_python() {
        let p = pkg("uvx", "mcp-server-time --local-timezone=Europe/Paris");
        assert_eq!(p.ecosystem, Ecosystem::Pypi);
        assert_eq!(p.package, "mcp-server-time");
        assert_eq!(p.wanted, Wanted::Latest);
        assert_eq!(p.args, ["--local-timezone=Europe/Paris"]);
        assert_eq!(
            pkg("uvx", "mcp-server-time@2026.10.19").wanted,
            Wanted::Exact("2026.10.19".into())
        );
        assert_eq!(
            pkg("uvx", "mcp-server-time==1.0").wanted,
            Wanted::Exact("1.0".into())
        );
        assert_eq!(pkg("uvx", "x>=1").wanted, Wanted::Range(">=1".into()));
        let p = pkg(
            "uv",
            "tool run --from mcp-server-fetch==1.0 --with httpx --python=3.11 mcp-server-fetch",
        );
        assert_eq!(p.package, "mcp-server-fetch");
        assert_eq!(p.bin.as_deref(), Some("mcp-server-fetch"));
        assert_eq!(p.with, ["httpx"]);
        assert_eq!(p.python.as_deref(), Some("3.11"));
        let p = pkg("uvx", "tool[cli] a");
        assert_eq!(
            (p.package.as_str(), p.bin.as_deref()),
            ("tool[cli]", Some("tool"))
        );
    }

    #[test]
    fn pipx_run_with_and_without_spec() {
        let p = pkg("pipx", "run mcp-server-time --x");
        assert_eq!(
            (p.package.as_str(), p.args.as_slice()),
            ("mcp-server-time", &["--x".to_string()][..])
        );
        let p = pkg("pipx", "run --spec pkg==2.0 cmd");
        assert_eq!(p.package, "pkg");
        assert_eq!(p.wanted, Wanted::Exact("2.0".into()));
        assert_eq!(p.bin.as_deref(), Some("cmd"));
    }

    #[test]
    fn containers_and_plain_commands() {
        assert_eq!(
            classify("docker", &argv("run -i --rm mcp/time")),
            Launcher::Container {
                runtime: "docker".into()
            }
        );
        assert!(matches!(
            classify("/usr/bin/podman", &argv("container run img")),
            Launcher::Container { .. }
        ));
        assert_eq!(classify("docker", &argv("ps")), Launcher::Plain);
        assert_eq!(classify("node", &argv("server.js")), Launcher::Plain);
        assert_eq!(classify("npm", &argv("start")), Launcher::Plain);
        assert_eq!(classify("uv", &argv("run server.py")), Launcher::Plain);
    }
}
