//! `palisade annotate --config FILE`: drafts an IronCurtain `tool-annotations.json` from the
//! configured servers' live tool lists. Each server is started exactly as `serve` starts it
//! (same launch request, same sandbox), asked for its tools, and stopped. Roles are guessed
//! from schema property names and MCP hints (`readOnlyHint`, `destructiveHint`) by
//! `policy::annotate::derive_annotation`; every entry is marked as a draft for review,
//! because a wrong role is a wrong policy.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::client::McpClient;
use crate::gateway::server::spawn;
use crate::policy::annotate::derive_annotation;
use crate::policy::load::ArgRoles;
use crate::policy::ToolInfo;

/// Draft tool-annotations.json from the configured servers' tools (review before use).
#[derive(Debug, Args)]
pub struct AnnotateArgs {
    /// Server configuration (`{"mcpServers": {...}}`).
    #[arg(long)]
    pub config: PathBuf,
    /// Where to write the draft.
    #[arg(long, default_value = "tool-annotations.json")]
    pub output: PathBuf,
    /// Replace the output file if it exists.
    #[arg(long)]
    pub force: bool,
    /// Seconds each server has to start and list its tools.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
}

pub fn run(args: AnnotateArgs) -> anyhow::Result<ExitCode> {
    if args.output.exists() && !args.force {
        anyhow::bail!(
            "{} exists; pass --force to replace it (it may hold reviewed annotations)",
            args.output.display()
        );
    }
    let mut config = crate::config::load_file(&args.config)?;
    // `npx -y`/`uvx` servers run from palisade's package cache, as under `serve`.
    let policy = config.settings.sandbox_policy;
    if let Some((name, reason)) = crate::packages::hooks::for_config(&mut config, policy)
        .into_iter()
        .next()
    {
        anyhow::bail!("server `{name}`: {reason}");
    }
    let sandbox_dir = match &config.settings.sandbox_dir {
        Some(d) => d.clone(),
        None => crate::gateway::default_sandbox_dir()?,
    };
    std::fs::create_dir_all(&sandbox_dir)
        .with_context(|| format!("cannot create sandbox dir {}", sandbox_dir.display()))?;
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let timeout = Duration::from_secs(args.timeout);
    let rt = super::runtime()?;
    let mut servers = Map::new();
    let mut failures = Vec::new();
    for (name, server) in &config.servers {
        let listed = rt.block_on(async {
            let mut req = spawn::launch_request(
                name,
                server,
                &config.settings,
                &sandbox_dir,
                home.as_deref(),
            )?;
            // `{roots}` placeholders get the same directories the server is granted, as in
            // `serve`.
            let paths: Vec<PathBuf> = req.grants.iter().map(|g| g.path.clone()).collect();
            req.args = crate::roots::args::expand_args(&req.args, &paths);
            // Listing tools needs no network, and annotate starts no egress proxy: a server
            // with an allowlist is listed with none (it was refused for want of a proxy).
            if matches!(req.network, crate::config::NetworkConfig::Allowlist(_)) {
                tracing::info!(server = %name, "listed without network (its allowlist applies under serve)");
                req.network = crate::config::NetworkConfig::None;
            }
            list_tools(&req, timeout).await
        });
        match listed {
            Ok(tools) => {
                tracing::info!(server = %name, "{} tools", tools.len());
                servers.insert(name.clone(), server_entry(name, &tools));
            }
            Err(e) => {
                eprintln!("palisade annotate: server `{name}`: {e:#}");
                failures.push(name.clone());
            }
        }
    }
    let doc = json!({
        "generatedAt": crate::audit::now_rfc3339(),
        "generatedBy": "palisade annotate: a DRAFT; review every argument's roles before use",
        "servers": servers,
    });
    let text = serde_json::to_string_pretty(&doc)? + "\n";
    std::fs::write(&args.output, text)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    eprintln!(
        "palisade annotate: wrote {} ({} server(s){})",
        args.output.display(),
        servers_len(&doc),
        if failures.is_empty() {
            String::new()
        } else {
            format!("; failed: {}", failures.join(", "))
        }
    );
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn servers_len(doc: &Value) -> usize {
    doc["servers"].as_object().map_or(0, Map::len)
}

/// Starts the server as `serve` would, lists its tools, stops it.
async fn list_tools(
    req: &crate::sandbox::launch::LaunchRequest,
    timeout: Duration,
) -> anyhow::Result<Vec<rmcp::model::Tool>> {
    let caps = crate::sandbox::capabilities::probe(crate::sandbox::capabilities::Depth::Full);
    let mut spawned = spawn::spawn(req, &caps)?;
    let roots: Vec<String> = req
        .grants
        .iter()
        .filter_map(|g| crate::roots::uri::path_to_uri(&g.path).ok())
        .collect();
    let outcome = async {
        let client = McpClient::connect((spawned.stdout, spawned.stdin), timeout, Some(roots))
            .await
            .context("initialize")?;
        let tools = client.list_tools().await.context("tools/list")?;
        // Closing the client closes the server's stdin: its cue to exit.
        drop(client);
        anyhow::Ok(tools)
    }
    .await;
    if tokio::time::timeout(Duration::from_secs(3), spawned.child.wait())
        .await
        .is_err()
    {
        let _ = spawned.child.kill().await;
    }
    outcome
}

/// One server's entry in IronCurtain's annotation format.
fn server_entry(name: &str, tools: &[rmcp::model::Tool]) -> Value {
    let mut hasher = Sha256::new();
    let mut entries = Vec::new();
    for t in tools {
        let schema = Value::Object(t.input_schema.as_ref().clone());
        hasher.update(t.name.as_bytes());
        hasher.update(schema.to_string().as_bytes());
        let ann = derive_annotation(&ToolInfo {
            name: &t.name,
            input_schema: &schema,
            read_only_hint: t.annotations.as_ref().and_then(|a| a.read_only_hint),
            destructive_hint: t.annotations.as_ref().and_then(|a| a.destructive_hint),
        });
        let mut args = Map::new();
        for (arg, roles) in &ann.args {
            let roles: Vec<&str> = match roles {
                ArgRoles::Static(r) => r.iter().map(|r| r.as_str()).collect(),
                // derive_annotation never guesses conditions; keep the default if it does.
                ArgRoles::Conditional(c) => c.default.iter().map(|r| r.as_str()).collect(),
            };
            args.insert(arg.clone(), json!(roles));
        }
        entries.push(json!({
            "toolName": t.name,
            "comment": format!(
                "DRAFT from palisade annotate: roles guessed from the schema and MCP hints \
                 (readOnlyHint={:?}, destructiveHint={:?}); review before use. {}",
                t.annotations.as_ref().and_then(|a| a.read_only_hint),
                t.annotations.as_ref().and_then(|a| a.destructive_hint),
                t.description.as_deref().unwrap_or("")
            ),
            "args": args,
            "serverName": name,
            "inputSchema": schema,
        }));
    }
    json!({"inputHash": hex::encode(hasher.finalize()), "tools": entries})
}
