//! `palisade bench-client` (hidden): measures an MCP server's per-call latency and
//! throughput with palisade's own client, for `scripts/bench.sh`.
//!
//! Prints one JSON object on stdout (this command's stdout is for the script, not MCP).
//! Timing is its job; it decides nothing and never leaves the server running.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use serde_json::{json, Value};

use crate::client::{call_tool_on, McpClient, SpawnOptions, StderrMode};

/// Measure per-call latency and throughput of one tool of an MCP server.
#[derive(Debug, Args)]
pub struct BenchClientArgs {
    /// Measured calls (after warm-up).
    #[arg(long, default_value_t = 1000)]
    pub calls: usize,
    /// Concurrent callers sharing the one connection.
    #[arg(long, default_value_t = 1)]
    pub concurrency: usize,
    /// Unmeasured calls first.
    #[arg(long, default_value_t = 50)]
    pub warmup: usize,
    /// Tool to call (e.g. `stat`, or `fs__stat` through the gateway).
    #[arg(long)]
    pub tool: String,
    /// Tool arguments as a JSON object.
    #[arg(long, default_value = "{}")]
    pub args: String,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout_secs: u64,
    /// Show the server's stderr (default: discarded).
    #[arg(long)]
    pub show_stderr: bool,
    /// Declare the roots capability with these directories (repeatable).
    #[arg(long = "root", value_name = "DIR")]
    pub roots: Vec<std::path::PathBuf>,
    /// The server command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<OsString>,
}

pub fn run(args: BenchClientArgs) -> anyhow::Result<ExitCode> {
    let tool_args: Value = serde_json::from_str(&args.args).context("--args is not JSON")?;
    anyhow::ensure!(tool_args.is_object(), "--args must be a JSON object");
    anyhow::ensure!(args.concurrency >= 1, "--concurrency must be at least 1");
    let roots = if args.roots.is_empty() {
        None
    } else {
        let mut uris = Vec::new();
        for r in &args.roots {
            uris.push(
                crate::roots::uri::path_to_uri(r)
                    .with_context(|| format!("--root {}: must be an absolute path", r.display()))?,
            );
        }
        Some(uris)
    };
    let report = super::runtime()?.block_on(bench(&args, tool_args, roots))?;
    println!("{report}");
    Ok(ExitCode::SUCCESS)
}

async fn bench(
    args: &BenchClientArgs,
    tool_args: Value,
    roots: Option<Vec<String>>,
) -> anyhow::Result<Value> {
    let timeout = Duration::from_secs(args.timeout_secs);
    let (program, rest) = args
        .command
        .split_first()
        .context("no server command given after --")?;
    let mut opts = SpawnOptions::new(program.clone()).args(rest.iter().cloned());
    opts.timeout = timeout;
    opts.roots = roots;
    opts.stderr = if args.show_stderr {
        StderrMode::Inherit
    } else {
        StderrMode::Null
    };
    let started = Instant::now();
    let client = McpClient::spawn(opts)
        .await
        .context("cannot start the server")?;
    let spawn_ms = started.elapsed().as_secs_f64() * 1e3;
    let outcome = measure(&client, args, &tool_args, timeout).await;
    client.shutdown().await;
    let (mut lat, errors, tool_errors, wall) = outcome?;
    let ok = lat.len();
    Ok(json!({
        "command": args.command.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>(),
        "tool": args.tool,
        "calls": args.calls,
        "concurrency": args.concurrency,
        "ok": ok,
        "errors": errors,
        "toolErrors": tool_errors,
        "spawnToInitializedMs": round2(spawn_ms),
        "wallMs": round2(wall.as_secs_f64() * 1e3),
        "throughputPerSec": round2(if wall.is_zero() { 0.0 } else { ok as f64 / wall.as_secs_f64() }),
        "latencyUs": latency_us(&mut lat),
    }))
}

/// min, median, p90, p99, max and mean of the latencies, in µs (sorts them).
pub(crate) fn latency_us(lat: &mut [Duration]) -> Value {
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        let idx = ((lat.len() as f64 - 1.0) * p).round() as usize;
        lat[idx.min(lat.len() - 1)].as_secs_f64() * 1e6
    };
    let mean = if lat.is_empty() {
        0.0
    } else {
        lat.iter().map(Duration::as_secs_f64).sum::<f64>() / lat.len() as f64 * 1e6
    };
    json!({
        "min": round2(pct(0.0)),
        "median": round2(pct(0.5)),
        "p90": round2(pct(0.9)),
        "p99": round2(pct(0.99)),
        "max": round2(pct(1.0)),
        "mean": round2(mean),
    })
}

pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Warm-up, then `calls` calls spread over `concurrency` workers on one connection.
/// Returns successful latencies, transport errors, `isError` results and wall time.
async fn measure(
    client: &McpClient,
    args: &BenchClientArgs,
    tool_args: &Value,
    timeout: Duration,
) -> anyhow::Result<(Vec<Duration>, usize, usize, Duration)> {
    for _ in 0..args.warmup {
        call_tool_on(client.peer(), timeout, &args.tool, tool_args.clone())
            .await
            .with_context(|| format!("warm-up call to {} failed", args.tool))?;
    }
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..args.concurrency {
        let n = args.calls / args.concurrency + usize::from(w < args.calls % args.concurrency);
        let peer = client.peer().clone();
        let tool = args.tool.clone();
        let a = tool_args.clone();
        workers.spawn(async move {
            let mut lat = Vec::with_capacity(n);
            let (mut errors, mut tool_errors) = (0usize, 0usize);
            for _ in 0..n {
                let t0 = Instant::now();
                match call_tool_on(&peer, timeout, &tool, a.clone()).await {
                    Ok(r) if r.is_error == Some(true) => tool_errors += 1,
                    Ok(_) => lat.push(t0.elapsed()),
                    Err(_) => errors += 1,
                }
            }
            (lat, errors, tool_errors)
        });
    }
    let mut all = Vec::with_capacity(args.calls);
    let (mut errors, mut tool_errors) = (0, 0);
    while let Some(res) = workers.join_next().await {
        let (lat, e, te) = res.context("bench worker panicked")?;
        all.extend(lat);
        errors += e;
        tool_errors += te;
    }
    Ok((all, errors, tool_errors, started.elapsed()))
}
