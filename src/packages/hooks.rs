//! The small entry points the commands call: `run` rewrites its command vector, `serve`
//! rewrites its config's servers, both before anything else looks at the command (profile
//! selection, the launch request). Kept here so that `commands::run` and `commands::serve`
//! each carry one call.
//!
//! Install scripts are decided here as well: the server's profile (named, or matched from
//! the runner line as written, before it is rewritten) is the only thing that turns them on
//! (`package.installScripts`); anything else, a profile catalog that cannot be read included,
//! leaves them off.
//!
//! Container runtimes are decided here too: a `docker run` server lives in a daemon's
//! container that bubblewrap around the `docker` client cannot contain, so enforce refuses
//! it and warn runs it unsandboxed, saying so.

use std::path::Path;

use crate::config::{GatewayConfig, SandboxPolicy, SandboxSetting};
use crate::profiles::Catalog;

use super::{classify, resolve, Cache, Ecosystem, Launcher, Mode, PackageError, Resolved};

/// Whether the fetch of an `ecosystem` package started by `command args...` runs the
/// package's install scripts: only for npm, and only when the server's profile (`profile`
/// by name, else matched from the line) has `package.installScripts`. No catalog, an unknown
/// or ambiguous profile: no (the launch reports those itself). Pure.
pub fn install_scripts(
    catalog: Option<&Catalog>,
    profile: Option<&str>,
    ecosystem: Ecosystem,
    command: &str,
    args: &[String],
) -> bool {
    ecosystem == Ecosystem::Npm
        && catalog
            .and_then(|c| crate::profiles::select(c, profile, command, args).ok())
            .flatten()
            .is_some_and(|s| s.profile.install_scripts())
}

/// `install_scripts` for a configured server: its `sandbox.profile` when it names one.
pub fn server_install_scripts(
    catalog: Option<&Catalog>,
    server: &crate::config::ServerConfig,
    ecosystem: Ecosystem,
) -> bool {
    let profile = match &server.sandbox {
        SandboxSetting::Enabled(sb) => sb.profile.as_deref(),
        SandboxSetting::Disabled => None,
    };
    install_scripts(catalog, profile, ecosystem, &server.command, &server.args)
}

/// The profile catalog, or `None` (said at debug level) when it cannot be loaded: install
/// scripts then stay off.
pub fn catalog(dir: Option<&Path>) -> Option<Catalog> {
    Catalog::load(dir)
        .map_err(|e| tracing::debug!("profiles not loaded for the package fetch: {e}"))
        .ok()
}

/// The profile choice `palisade run` was given.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunProfile<'a> {
    /// `--profile`.
    pub name: Option<&'a str>,
    /// `--profiles-dir`.
    pub dir: Option<&'a Path>,
}

/// Why a container runtime is not sandboxed (shown by `run`, `serve`, the docs).
pub fn container_reason(runtime: &str) -> String {
    format!(
        "`{runtime} run` starts the server in a container owned by the {runtime} daemon, outside \
         any sandbox palisade can put around the `{runtime}` client; run the server's own \
         binary or package (e.g. `npx -y PKG`, `uvx PKG`) instead"
    )
}

/// What `run` must do with its command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunDecision {
    /// Launch as (now) written, sandboxed.
    Sandboxed,
    /// Launch unsandboxed (warn mode, container runtime); the reason was printed.
    Uncontained(String),
}

/// Why `run` cannot start its command.
#[derive(Debug, thiserror::Error)]
pub enum RunHookError {
    /// enforce and a container runtime.
    #[error("refusing to run `{command}` (sandbox policy is enforce): {reason}")]
    Refused { command: String, reason: String },
    /// A runner line that names no package.
    #[error("{0}")]
    NoPackage(String),
    #[error(transparent)]
    Package(#[from] Box<PackageError>),
}

/// For `palisade run`: rewrites a package runner line in `command` (program first) to the
/// cached entry point, fetching it on first use; decides a container runtime line by `policy`.
pub fn for_run(
    command: &mut Vec<String>,
    policy: SandboxPolicy,
    profile: RunProfile<'_>,
) -> Result<RunDecision, RunHookError> {
    let Some((program, args)) = command.split_first() else {
        return Ok(RunDecision::Sandboxed);
    };
    match classify(program, args) {
        Launcher::Plain => Ok(RunDecision::Sandboxed),
        Launcher::NoPackage { runner } => Err(RunHookError::NoPackage(
            super::runner::no_package_reason(&runner, "the command after --"),
        )),
        Launcher::Unsupported { runner, why } => {
            eprintln!(
                "palisade: WARNING: `{runner}` line not fetched ahead ({why}); it runs as written, \
                 and in the sandbox it has no registry unless --allow-domain grants one"
            );
            Ok(RunDecision::Sandboxed)
        }
        Launcher::Container { runtime } => {
            let reason = container_reason(&runtime);
            match policy {
                SandboxPolicy::Enforce => Err(RunHookError::Refused {
                    command: program.clone(),
                    reason,
                }),
                SandboxPolicy::Warn => {
                    eprintln!(
                        "palisade: WARNING: running `{program}` UNCONTAINED (sandbox policy is warn): {reason}"
                    );
                    Ok(RunDecision::Uncontained(reason))
                }
            }
        }
        Launcher::Package(mut run) => {
            run.install_scripts = install_scripts(
                catalog(profile.dir).as_ref(),
                profile.name,
                run.ecosystem,
                program,
                args,
            );
            let cache = Cache::from_env().map_err(Box::new)?;
            let r = resolve(&cache, &run, Mode::Locked).map_err(Box::new)?;
            say_resolved(&run.runner, &r);
            *command = rewritten(&r);
            Ok(RunDecision::Sandboxed)
        }
    }
}

/// The command vector that runs a resolved package.
pub fn rewritten(r: &Resolved) -> Vec<String> {
    std::iter::once(r.command.to_string_lossy().into_owned())
        .chain(r.args.iter().cloned())
        .collect()
}

fn say_resolved(runner: &str, r: &Resolved) {
    tracing::info!(
        runner,
        package = %r.locked.package,
        version = %r.locked.version,
        integrity = %r.locked.integrity,
        command = %r.command.display(),
        from_cache = !r.fetched,
        "package runner rewritten to the cached entry point"
    );
}

/// For `palisade serve`: rewrites every sandboxed server's package runner line; refuses
/// (enforce) or opts out with a warning (warn) a container runtime line. `default_policy` is
/// the gateway-wide policy after flags. A server that cannot be resolved (its package cannot
/// be fetched, no cache directory, a container runtime under enforce) is returned with the
/// reason, to be refused alone: the other servers still start.
pub fn for_config(
    config: &mut GatewayConfig,
    default_policy: Option<SandboxPolicy>,
) -> Vec<(String, String)> {
    let mut cache = None;
    let mut profiles: Option<Option<Catalog>> = None;
    let profiles_dir = config.settings.profiles_dir.clone();
    let mut refused = Vec::new();
    for (name, server) in &mut config.servers {
        let SandboxSetting::Enabled(sb) = &server.sandbox else {
            continue;
        };
        let policy = sb.policy.or(default_policy).unwrap_or_default();
        match classify(&server.command, &server.args) {
            Launcher::Plain => {}
            // Whatever the policy: npx with no package runs the agent's lines as commands.
            Launcher::NoPackage { runner } => refused.push((
                name.clone(),
                super::runner::no_package_reason(&runner, &format!("mcpServers.{name}.args")),
            )),
            Launcher::Unsupported { runner, why } => tracing::warn!(
                server = %name,
                "`{runner}` line not fetched ahead ({why}); it runs as written, and in the \
                 sandbox it has no registry unless sandbox.network allows one"
            ),
            Launcher::Container { runtime } => {
                let reason = container_reason(&runtime);
                match policy {
                    SandboxPolicy::Enforce => refused.push((
                        name.clone(),
                        format!(
                            "refusing `{}` (sandbox policy is enforce): {reason}",
                            server.command
                        ),
                    )),
                    SandboxPolicy::Warn => {
                        tracing::warn!(server = %name, "running UNCONTAINED (sandbox policy is warn): {reason}");
                        server.sandbox = SandboxSetting::Disabled;
                    }
                }
            }
            Launcher::Package(mut run) => {
                let known = profiles.get_or_insert_with(|| catalog(profiles_dir.as_deref()));
                run.install_scripts = server_install_scripts(known.as_ref(), server, run.ecosystem);
                let resolved = match &cache {
                    Some(c) => Ok(c),
                    None => Cache::from_env().map(|c| &*cache.insert(c)),
                }
                .and_then(|c| resolve(c, &run, Mode::Locked));
                match resolved {
                    Ok(r) => {
                        say_resolved(&run.runner, &r);
                        let mut argv = rewritten(&r);
                        server.command = argv.remove(0);
                        server.args = argv;
                    }
                    Err(e) => refused.push((name.clone(), e.to_string())),
                }
            }
        }
    }
    refused
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_str;

    const DOCKER: &str = r#"{"mcpServers": {
        "time": {"command": "docker", "args": ["run", "-i", "--rm", "mcp/time"]},
        "plain": {"command": "node", "args": ["s.js"]}}}"#;

    #[test]
    fn docker_servers_are_refused_in_enforce_and_opted_out_in_warn() {
        let mut cfg = parse_str(DOCKER, "t.json").unwrap();
        let refused = for_config(&mut cfg, None);
        assert_eq!(refused.len(), 1, "only the docker server: {refused:?}");
        let (name, reason) = &refused[0];
        assert!(
            name == "time" && reason.contains("docker daemon"),
            "{refused:?}"
        );
        let mut cfg = parse_str(DOCKER, "t.json").unwrap();
        assert!(for_config(&mut cfg, Some(SandboxPolicy::Warn)).is_empty());
        assert_eq!(cfg.servers[0].1.sandbox, SandboxSetting::Disabled);
        assert_ne!(cfg.servers[1].1.sandbox, SandboxSetting::Disabled);
        assert_eq!(
            cfg.servers[1].1.command, "node",
            "plain commands are left alone"
        );
    }

    #[test]
    fn install_scripts_only_when_the_servers_npm_profile_asks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("native.json"),
            r#"{"description": "d", "match": {"packages": ["native-pkg"], "executables": ["native-py"]},
                "package": {"installScripts": true, "reason": "builds its addon"}}"#,
        )
        .unwrap();
        let c = Catalog::load(Some(dir.path())).unwrap();
        let argv = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let npm = Ecosystem::Npm;
        let on = |c: Option<&Catalog>, name: Option<&str>, cmd: &str, args: &str| {
            install_scripts(c, name, npm, cmd, &argv(args))
        };
        assert!(on(Some(&c), None, "npx", "-y native-pkg@1.0.0 /srv"));
        assert!(on(Some(&c), Some("native"), "npx", "-y other"), "named");
        assert!(!on(Some(&c), Some("none"), "npx", "-y native-pkg"), "none");
        assert!(!on(Some(&c), None, "npx", "-y other-pkg"), "no profile");
        assert!(
            !on(
                Some(&c),
                None,
                "npx",
                "-y @modelcontextprotocol/server-memory"
            ),
            "a profile without a package section"
        );
        assert!(
            !on(Some(&c), Some("nope"), "npx", "-y native-pkg"),
            "unknown"
        );
        assert!(!on(None, None, "npx", "-y native-pkg"), "no catalog");
        assert!(
            !install_scripts(Some(&c), None, Ecosystem::Pypi, "uvx", &argv("native-py")),
            "PyPI has no install scripts to turn on"
        );
    }

    #[test]
    fn run_refuses_docker_in_enforce_and_leaves_plain_commands() {
        let mut argv: Vec<String> = ["docker", "run", "img"].map(String::from).to_vec();
        assert!(matches!(
            for_run(&mut argv, SandboxPolicy::Enforce, RunProfile::default()),
            Err(RunHookError::Refused { .. })
        ));
        assert!(matches!(
            for_run(&mut argv, SandboxPolicy::Warn, RunProfile::default()),
            Ok(RunDecision::Uncontained(_))
        ));
        let mut argv: Vec<String> = ["node", "s.js"].map(String::from).to_vec();
        assert_eq!(
            for_run(&mut argv, SandboxPolicy::Enforce, RunProfile::default()).unwrap(),
            RunDecision::Sandboxed
        );
        assert_eq!(argv, ["node", "s.js"]);
    }
}
