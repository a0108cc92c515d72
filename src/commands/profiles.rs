//! `palisade profiles list|show NAME`: the known sandbox profiles, and what one yields on
//! this machine (mounts, env, network, relaxations). Reads profiles and checks which paths
//! exist; creates nothing and starts nothing. Output on stdout.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::profiles::{self, Catalog, Profile, ProfileSource};
use crate::sandbox::launch::{self, LaunchRequest};

/// List sandbox profiles or show one.
#[derive(Debug, Args)]
pub struct ProfilesArgs {
    /// Directory of profiles that override the built-in ones (default: the config's
    /// `palisade.profilesDir`, if `--config` is given).
    #[arg(long, global = true, value_name = "DIR")]
    pub profiles_dir: Option<PathBuf>,
    /// Take `profilesDir` and `stateDir` from this configuration's `palisade` block.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: ProfilesCommand,
}

#[derive(Debug, Subcommand)]
pub enum ProfilesCommand {
    /// Every known profile: name, origin, what it matches.
    List,
    /// One profile and the mounts, env and network it yields on this machine.
    Show {
        /// The profile's name (see `palisade profiles list`).
        name: String,
        /// The server name whose state directory is shown (default: the profile's name).
        #[arg(long)]
        server: Option<String>,
    },
}

#[derive(Debug, Serialize)]
struct Listed<'a> {
    name: &'a str,
    source: &'a ProfileSource,
    matches: Vec<String>,
    description: &'a str,
}

/// What a profile yields here.
#[derive(Debug, Serialize)]
struct Shown<'a> {
    name: &'a str,
    source: &'a ProfileSource,
    profile: &'a Profile,
    /// Mounts the profile adds (the system base and the command's runtime closure come on
    /// top, as for every server).
    mounts: Vec<ShownMount>,
    env: std::collections::BTreeMap<String, String>,
    network: String,
    /// How the server's roots reach it besides MCP roots and bind mounts, in words.
    roots: String,
    relaxations: Vec<String>,
}

#[derive(Debug, Serialize)]
struct ShownMount {
    path: PathBuf,
    access: &'static str,
    origin: &'static str,
    present: bool,
}

pub fn run(args: ProfilesArgs) -> anyhow::Result<ExitCode> {
    let (dir, state_root) = dirs(&args)?;
    let catalog = Catalog::load(dir.as_deref()).context("cannot load sandbox profiles")?;
    let out = match &args.command {
        ProfilesCommand::List => list(&catalog, args.json)?,
        ProfilesCommand::Show { name, server } => {
            let Some(profile) = catalog.get(name) else {
                anyhow::bail!(
                    "no profile `{name}` (known: {})",
                    catalog.names().join(", ")
                );
            };
            let source = catalog.source(name).unwrap_or(&ProfileSource::BuiltIn);
            let shown = show(profile, source, server.as_deref(), state_root);
            if args.json {
                serde_json::to_string_pretty(&shown)? + "\n"
            } else {
                show_text(&shown)
            }
        }
    };
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// The profiles directory and state root from the flags, else from `--config`.
fn dirs(args: &ProfilesArgs) -> anyhow::Result<(Option<PathBuf>, Option<PathBuf>)> {
    let mut dir = args.profiles_dir.clone();
    let mut state = None;
    if let Some(path) = &args.config {
        let cfg = crate::config::load_file(path)?;
        dir = dir.or(cfg.settings.profiles_dir);
        state = cfg.settings.state_dir;
    }
    Ok((dir, state))
}

/// Match rules in words.
fn match_words(p: &Profile) -> Vec<String> {
    let m = &p.matches;
    let mut v: Vec<String> = m.packages.iter().map(|x| format!("npm {x}")).collect();
    v.extend(m.executables.iter().map(|x| format!("executable {x}")));
    v.extend(m.python_modules.iter().map(|x| format!("python -m {x}")));
    v.extend(
        m.argv_prefixes
            .iter()
            .map(|x| format!("command `{}`", x.join(" "))),
    );
    v
}

fn list(catalog: &Catalog, json: bool) -> anyhow::Result<String> {
    let rows: Vec<Listed> = catalog
        .iter()
        .map(|(p, source)| Listed {
            name: &p.name,
            source,
            matches: match_words(p),
            description: &p.description,
        })
        .collect();
    if json {
        return Ok(serde_json::to_string_pretty(&rows)? + "\n");
    }
    let mut s = String::new();
    for r in rows {
        let _ = writeln!(s, "{} ({})", r.name, r.source);
        let shown = if r.matches.is_empty() {
            "(by name only)".to_string()
        } else {
            r.matches.join(", ")
        };
        let _ = writeln!(s, "  matches: {shown}");
    }
    Ok(s)
}

fn show<'a>(
    profile: &'a Profile,
    source: &'a ProfileSource,
    server: Option<&str>,
    state_root: Option<PathBuf>,
) -> Shown<'a> {
    let req = LaunchRequest {
        name: server.unwrap_or(&profile.name).to_string(),
        state_root,
        ..LaunchRequest::default()
    };
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let state_dir = launch::state_dir_for(&req, home.as_deref())
        .unwrap_or_else(|| PathBuf::from("(no HOME: set palisade.stateDir)"));
    let sandbox_home = home
        .clone()
        .unwrap_or_else(|| PathBuf::from("/home/sandbox"));
    let plan = profiles::plan(
        profile,
        &profiles::Context {
            host_home: home.as_deref(),
            sandbox_home: &sandbox_home,
            state_dir: &state_dir,
        },
    );
    let mut mounts = Vec::new();
    if let Some(d) = &plan.state_dir {
        mounts.push(ShownMount {
            path: d.clone(),
            access: "rw",
            origin: "state (created at launch, 0700)",
            present: d.is_dir(),
        });
    }
    mounts.extend(plan.read.iter().map(|p| ShownMount {
        path: p.clone(),
        access: "ro",
        origin: "profile",
        present: Path::new(p).exists(),
    }));
    let network = match &profile.network {
        profiles::ProfileNetwork::None => "none (loopback only)".to_string(),
        profiles::ProfileNetwork::Domains {
            allowed_domains,
            reason,
        } if allowed_domains.is_empty() => {
            format!("none by default; the user's sandbox.network.allowedDomains ({reason})")
        }
        profiles::ProfileNetwork::Domains {
            allowed_domains,
            reason,
        } => format!(
            "{} plus the user's allowlist ({reason})",
            allowed_domains.join(", ")
        ),
    };
    let mut relaxations = Vec::new();
    if let Some(r) = &profile.relax.share_pid {
        relaxations.push(format!("shares the host PID namespace: {r}"));
    }
    // Package code that runs at fetch time (in the fetch sandbox): shown like a relaxation.
    if let Some(p) = profile.package.as_ref().filter(|p| p.install_scripts) {
        relaxations.push(format!(
            "runs the npm package's install scripts during its fetch, inside the fetch sandbox: {}",
            p.reason
        ));
    }
    // Relaying reaches past the sandbox (the agent's model, the user): shown like one.
    if let Some(relay) = &profile.relay {
        for (on, what) in [
            (relay.sampling, "sampling"),
            (relay.elicitation, "elicitation"),
        ] {
            if on == Some(true) {
                relaxations.push(format!(
                    "relays the server's {what} requests to the agent (a server's config turns it off with \"relay\": {{\"{what}\": false}})"
                ));
            }
        }
    }
    Shown {
        name: &profile.name,
        source,
        profile,
        mounts,
        env: plan.env,
        network,
        roots: roots_words(profile.roots_as.as_ref()),
        relaxations,
    }
}

/// A profile's `rootsAs` in words (what `sandbox::launch` does with it at every launch).
fn roots_words(roots_as: Option<&profiles::RootsAs>) -> String {
    use profiles::{Only, RootsAs};
    const ORDER: &str = "the server's own roots (policy, grants, approvals), then the session sandbox dir; re-delivered at each relaunch";
    match roots_as {
        None => "MCP roots and bind mounts only".to_string(),
        Some(RootsAs::Args(_)) => {
            format!("each root appended as an argument, unless already there: {ORDER}")
        }
        Some(RootsAs::Flag(f)) if f.only == Some(Only::First) => format!(
            "`{} ROOT` with the server's first own root (never the session sandbox dir); none if the config already passes {0}",
            f.flag
        ),
        Some(RootsAs::Flag(f)) => format!("`{} ROOT` per root: {ORDER}", f.flag),
        Some(RootsAs::Env(e)) => format!(
            "{}=ROOTS joined with `{}` (the config's own {0} wins): {ORDER}",
            e.env, e.separator
        ),
    }
}

fn show_text(s: &Shown<'_>) -> String {
    let p = s.profile;
    let mut o = String::new();
    let _ = writeln!(o, "{} ({})", s.name, s.source);
    let _ = writeln!(o, "  {}", p.description);
    let m = match_words(p);
    let _ = writeln!(
        o,
        "  matches:      {}",
        if m.is_empty() {
            "(by name only)".into()
        } else {
            m.join(", ")
        }
    );
    let _ = writeln!(
        o,
        "  mounts:       the system base, the command's runtime closure, its roots{}",
        if s.mounts.is_empty() { "" } else { ", and:" }
    );
    for mount in &s.mounts {
        let _ = writeln!(
            o,
            "    {} {} ({}{})",
            mount.access,
            mount.path.display(),
            mount.origin,
            match (mount.present, mount.access) {
                (true, _) => "",
                (false, "rw") => "; not created yet",
                (false, _) => "; absent on this machine, skipped",
            }
        );
    }
    if let Some(st) = &p.state {
        let _ = writeln!(o, "  state:        {}", st.reason);
    }
    if s.env.is_empty() {
        let _ = writeln!(
            o,
            "  env:          (nothing beyond PATH, HOME, TMPDIR, LANG)"
        );
    } else {
        let _ = writeln!(o, "  env:");
        for (k, v) in &s.env {
            let _ = writeln!(o, "    {k}={v}");
        }
    }
    let _ = writeln!(o, "  network:      {}", s.network);
    let _ = writeln!(o, "  roots as:     {}", s.roots);
    let _ = writeln!(
        o,
        "  roots tool:   {}",
        p.roots_tool.as_deref().unwrap_or("(none)")
    );
    if s.relaxations.is_empty() {
        let _ = writeln!(o, "  relaxations:  none");
    } else {
        for r in &s.relaxations {
            let _ = writeln!(o, "  relaxation:   {r}");
        }
    }
    o
}
