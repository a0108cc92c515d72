//! `palisade prefetch`: fills the package cache (and its lock) for every package runner line
//! of a config, or for one command line, where the registry is reachable: for CI, images and
//! air-gapped hosts, and to move unpinned packages on with `--refresh`. Prints one line per
//! package on stdout (this command is not an MCP channel); progress goes to stderr.

use std::process::ExitCode;

use clap::Args;

use super::ExitWith;
use crate::packages::{classify, resolve, Cache, Launcher, Mode};

/// Fetch the packages that `npx -y`/`uvx`/... servers run into palisade's cache.
///
/// Exit status: 0 when every package is cached, 1 when one could not be fetched, 2 for bad
/// input.
#[derive(Debug, Args)]
pub struct PrefetchArgs {
    /// Server configuration whose servers' packages to fetch.
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Resolve unpinned packages again and lock the newest versions (pinned ones stay).
    #[arg(long)]
    pub refresh: bool,
    /// Sandbox profile of the command line's server (as `palisade run --profile`); its
    /// `package.installScripts` decides whether npm's install scripts run in the fetch.
    #[arg(long)]
    pub profile: Option<String>,
    /// Directory of profiles that override the built-in ones, for the command line (a
    /// config's own `palisade.profilesDir` applies to its servers).
    #[arg(long, value_name = "DIR")]
    pub profiles_dir: Option<std::path::PathBuf>,
    /// One command line instead of (or besides) a config, e.g. `-- npx -y @scope/server`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn run(args: PrefetchArgs) -> anyhow::Result<ExitCode> {
    use crate::packages::hooks;
    // Each line with whether its profile turns install scripts on (npm only).
    let mut lines: Vec<(String, String, Vec<String>, bool)> = Vec::new();
    if let Some(path) = &args.config {
        let cfg = crate::config::load_file(path)?;
        let profiles = hooks::catalog(cfg.settings.profiles_dir.as_deref());
        for (name, s) in cfg.servers {
            let scripts = hooks::server_install_scripts(
                profiles.as_ref(),
                &s,
                crate::packages::Ecosystem::Npm,
            );
            lines.push((name, s.command, s.args, scripts));
        }
    }
    if let Some((cmd, rest)) = args.command.split_first() {
        let profiles = hooks::catalog(args.profiles_dir.as_deref());
        let scripts = hooks::install_scripts(
            profiles.as_ref(),
            args.profile.as_deref(),
            crate::packages::Ecosystem::Npm,
            cmd,
            rest,
        );
        lines.push(("(command line)".into(), cmd.clone(), rest.to_vec(), scripts));
    }
    if lines.is_empty() {
        return Err(ExitWith::new(2, "give --config FILE or a command after `--`").into());
    }
    let cache = Cache::from_env()?;
    let mode = if args.refresh {
        Mode::Refresh
    } else {
        Mode::Locked
    };
    let mut failed = 0;
    for (name, command, argv, scripts) in lines {
        match classify(&command, &argv) {
            Launcher::Plain => println!("{name}: not a package runner, nothing to fetch"),
            Launcher::Container { runtime } => println!(
                "{name}: {}",
                crate::packages::hooks::container_reason(&runtime)
            ),
            Launcher::Unsupported { runner, why } => {
                failed += 1;
                println!("{name}: `{runner}` line not fetched ahead: {why}");
            }
            Launcher::NoPackage { runner } => {
                failed += 1;
                println!(
                    "{name}: {}",
                    crate::packages::runner::no_package_reason(&runner, "its args")
                );
            }
            Launcher::Package(mut run) => {
                run.install_scripts = scripts && run.ecosystem == crate::packages::Ecosystem::Npm;
                match resolve(&cache, &run, mode) {
                    Ok(r) => println!(
                        "{name}: {} {} {} ({}, {}{}) -> {}",
                        run.ecosystem,
                        r.locked.package,
                        r.locked.version,
                        if r.fetched { "fetched" } else { "cached" },
                        r.locked.integrity,
                        if r.locked.install_scripts {
                            ", install scripts ran"
                        } else {
                            ""
                        },
                        r.command.display()
                    ),
                    Err(e) => {
                        failed += 1;
                        eprintln!("palisade: {name}: {e}");
                    }
                }
            }
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
