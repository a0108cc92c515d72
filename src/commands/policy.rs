//! `palisade policy`: evaluate one call, print derived roots, run a scenario file.
//! The edge: loads files with context on errors, prints JSON on stdout, decides exit codes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::config::GatewayConfig;
use crate::policy::{scenarios, CallContext, Policy, PolicyOptions, PolicyPaths, Scope};
use crate::roots::derive::{derive_for_server, derive_roots};

/// Inspect and test policies.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub command: PolicyCommand,
}

/// The policy files and session paths every subcommand takes.
#[derive(Debug, Clone, Args)]
pub struct PolicyFiles {
    /// compiled-policy.json (omit for the built-in default policy).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// tool-annotations.json.
    #[arg(long)]
    pub annotations: Option<PathBuf>,
    /// dynamic-lists.json (`@list` references; a missing list matches nothing).
    #[arg(long)]
    pub lists: Option<PathBuf>,
    /// The session sandbox dir (path roles inside it are allowed).
    #[arg(long)]
    pub sandbox_dir: Option<PathBuf>,
    /// Server config (mcpServers): supplies per-server allowedDomains and filesystem grants.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Home directory for `~` (defaults to $HOME).
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// Working directory relative paths resolve against (the server's; none: refused).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// A path always denied (repeatable). The policy files given here are always protected.
    #[arg(long = "protected")]
    pub protected: Vec<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// Decide one call and explain the decision.
    Explain {
        #[command(flatten)]
        files: PolicyFiles,
        #[arg(long)]
        server: String,
        #[arg(long)]
        tool: String,
        /// The call's arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
    },
    /// Print the roots a policy grants each server.
    Roots {
        #[command(flatten)]
        files: PolicyFiles,
        /// Only this server (default: every configured, annotated or named server).
        #[arg(long)]
        server: Option<String>,
    },
    /// Run an IronCurtain test-scenarios.json: one JSON line per scenario and a summary.
    /// Exits 1 when a scenario fails.
    Test {
        #[command(flatten)]
        files: PolicyFiles,
        #[arg(long)]
        scenarios: PathBuf,
    },
}

struct Loaded {
    policy: Policy,
    config: Option<GatewayConfig>,
    home: Option<PathBuf>,
    scope: Scope,
}

fn load(files: &PolicyFiles) -> anyhow::Result<Loaded> {
    let config = files
        .config
        .as_deref()
        .map(|c| crate::config::load_file(c).with_context(|| format!("loading {}", c.display())))
        .transpose()?;
    // As `serve` does: files and sandbox dir not given as flags come from the config's
    // `palisade` block, and the sandbox dir falls back to the default.
    let mut files_owned;
    let files = match &config {
        Some(cfg) => {
            let s = &cfg.settings;
            files_owned = files.clone();
            let f = &mut files_owned;
            f.policy = f.policy.take().or_else(|| s.policy.clone());
            f.annotations = f.annotations.take().or_else(|| s.annotations.clone());
            f.lists = f.lists.take().or_else(|| s.lists.clone());
            if f.sandbox_dir.is_none() {
                f.sandbox_dir = match &s.sandbox_dir {
                    Some(d) => Some(d.clone()),
                    None => Some(crate::gateway::default_sandbox_dir()?),
                };
            }
            &files_owned
        }
        None => files,
    };
    let home = files
        .home
        .clone()
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from));
    let server_domains = config
        .as_ref()
        .map(PolicyOptions::server_domains_from)
        .unwrap_or_default();
    let policy = Policy::load(
        &PolicyPaths {
            policy: files.policy.clone(),
            annotations: files.annotations.clone(),
            lists: files.lists.clone(),
        },
        PolicyOptions {
            home: home.clone(),
            server_domains,
        },
    )
    .context("loading the policy")?;
    for w in policy.warnings() {
        tracing::warn!("{w}");
    }
    let mut protected: Vec<PathBuf> = files.protected.clone();
    for f in [
        &files.policy,
        &files.annotations,
        &files.lists,
        &files.config,
    ]
    .into_iter()
    .flatten()
    {
        protected.push(absolute(f)?);
    }
    let sandbox = files.sandbox_dir.as_deref().map(absolute).transpose()?;
    let scope = Scope::new(sandbox.as_deref(), &protected, home.as_deref())
        .context("canonicalising the sandbox dir and protected paths")?;
    Ok(Loaded {
        policy,
        config,
        home,
        scope,
    })
}

fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("making {} absolute", p.display()))
}

fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, v)?;
    writeln!(out)?;
    Ok(())
}

pub fn run(args: PolicyArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        PolicyCommand::Explain {
            files,
            server,
            tool,
            args,
        } => {
            let l = load(&files)?;
            let value: serde_json::Value =
                serde_json::from_str(&args).context("--args is not valid JSON")?;
            let serde_json::Value::Object(arguments) = value else {
                anyhow::bail!("--args must be a JSON object");
            };
            let roots: Vec<PathBuf> = match &l.config {
                Some(cfg) => server_roots(&l, cfg, &server)?,
                None => l.scope.sandbox_dir.iter().cloned().collect(),
            };
            let d = l.policy.evaluate(&CallContext {
                server: &server,
                tool: &tool,
                arguments: &arguments,
                cwd: files.cwd.as_deref(),
                home: l.home.as_deref(),
                scope: &l.scope,
                roots: &roots,
            });
            let mut out = serde_json::json!({
                "decision": d.status,
                "rule": d.rule,
                "reason": d.reason,
                "roles": d.roles,
            });
            // Without an annotations file, `serve` guesses a tool's roles from the server's
            // live definition, which `explain` does not have: say so rather than disagree
            // silently.
            if d.rule == "structural-unknown-tool" && !l.policy.annotations_from_file {
                out["note"] = serde_json::json!(
                    "`serve` judges this tool by the roles it guesses from the server's live \
                     definition (no annotations file); to explain it as serve would, draft \
                     one with `palisade annotate --config FILE` and pass it with --annotations"
                );
            }
            print_json(&out)?;
            Ok(ExitCode::SUCCESS)
        }
        PolicyCommand::Roots { files, server } => {
            let l = load(&files)?;
            let names: Vec<String> = match server {
                Some(s) => vec![s],
                None => all_servers(&l),
            };
            for name in names {
                match &l.config {
                    // With a config: exactly the set `serve` mounts and announces (the same
                    // function), plus the derived roots it leaves out and why.
                    Some(cfg) => {
                        let r = derive_for_server(
                            &l.policy,
                            &name,
                            cfg.server(&name),
                            l.scope.sandbox_dir.as_deref(),
                            l.home.as_deref(),
                        )
                        .with_context(|| format!("deriving the roots of {name}"))?;
                        print_json(&serde_json::json!({
                            "server": name, "roots": r.roots, "skipped": r.skipped,
                        }))?;
                    }
                    None => {
                        let roots = derive_roots(
                            &l.policy,
                            &name,
                            l.scope.sandbox_dir.as_deref(),
                            None,
                            l.home.as_deref(),
                        )
                        .with_context(|| format!("deriving the roots of {name}"))?;
                        print_json(&serde_json::json!({"server": name, "roots": roots}))?;
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        PolicyCommand::Test { files, scenarios } => {
            let l = load(&files)?;
            let file = scenarios::load(&scenarios)
                .with_context(|| format!("loading {}", scenarios.display()))?;
            let env = scenarios::Env {
                home: l.home.clone(),
                cwd: files.cwd.clone(),
                scope: l.scope.clone(),
            };
            let outcomes = scenarios::run(&l.policy, &file, &env);
            for o in &outcomes {
                print_json(o)?;
            }
            let passed = outcomes.iter().filter(|o| o.pass).count();
            print_json(&serde_json::json!({"summary": {
                "total": outcomes.len(),
                "passed": passed,
                "failed": outcomes.len() - passed,
            }}))?;
            Ok(if passed == outcomes.len() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

fn server_roots(l: &Loaded, cfg: &GatewayConfig, server: &str) -> anyhow::Result<Vec<PathBuf>> {
    Ok(derive_for_server(
        &l.policy,
        server,
        cfg.server(server),
        l.scope.sandbox_dir.as_deref(),
        l.home.as_deref(),
    )?
    .roots
    .into_iter()
    .map(|r| r.path)
    .collect())
}

/// Configured servers first, then servers only the annotations or rules name.
fn all_servers(l: &Loaded) -> Vec<String> {
    let mut names: Vec<String> = l
        .config
        .iter()
        .flat_map(|c| c.servers.iter().map(|(n, _)| n.clone()))
        .collect();
    let mut extra: Vec<String> = l
        .policy
        .annotated_servers()
        .map(str::to_string)
        .chain(
            l.policy
                .rules()
                .iter()
                .flat_map(|r| r.server.iter().flatten().cloned()),
        )
        .collect();
    extra.sort();
    for n in extra {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names
}
