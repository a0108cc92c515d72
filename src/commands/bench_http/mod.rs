//! `palisade bench-http` (hidden): load on the HTTP front (`serve --http`) from a native
//! client, for `scripts/load-http.sh`. N principals, each with its own bearer token, each
//! opens a 2025-11-25 session, then makes its calls over `--concurrency` kept-alive HTTP/1.1
//! connections at once; every principal calls at the same time. Prints one JSON object on
//! stdout like `bench-client`: per-call latency, calls/s, errors.
//!
//! Timing is its job; it decides nothing. Never: print a token (failures name the principal).

mod session;
mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use serde_json::{json, Value};

use super::bench_client::{latency_us, round2};
use session::{Called, Session};
use wire::Conn;

/// Measure per-call latency and throughput of `serve --http` with many principals.
#[derive(Debug, Args)]
pub struct BenchHttpArgs {
    /// The MCP endpoint, `http://HOST:PORT/mcp`.
    #[arg(long)]
    pub url: String,
    /// The principals and their tokens in clear, one `PRINCIPAL TOKEN` per line (`#`
    /// comments); the server's `--tokens` file holds their SHA-256.
    #[arg(long)]
    pub tokens: PathBuf,
    /// Use the first N principals of the file (default: all).
    #[arg(long)]
    pub principals: Option<usize>,
    /// Measured calls per principal (after warm-up).
    #[arg(long, default_value_t = 200)]
    pub calls: usize,
    /// Connections (calls at once) per principal.
    #[arg(long, default_value_t = 1)]
    pub concurrency: usize,
    /// Unmeasured calls per connection first.
    #[arg(long, default_value_t = 5)]
    pub warmup: usize,
    /// At most this many principals initialise at once (each first request starts servers).
    #[arg(long, default_value_t = 8)]
    pub init_concurrency: usize,
    /// Tool to call (e.g. `fs__stat`).
    #[arg(long)]
    pub tool: String,
    /// Tool arguments as a JSON object; `{principal}` is replaced by the principal's name.
    #[arg(long, default_value = "{}")]
    pub args: String,
    /// Paced load: each connection starts a call every this many milliseconds (spread
    /// evenly over the connections), instead of the next as soon as the last is answered.
    #[arg(long)]
    pub interval_ms: Option<f64>,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout_secs: u64,
}

pub fn run(args: BenchHttpArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.concurrency >= 1, "--concurrency must be at least 1");
    anyhow::ensure!(
        args.init_concurrency >= 1,
        "--init-concurrency must be at least 1"
    );
    let text = std::fs::read_to_string(&args.tokens)
        .with_context(|| format!("cannot read {}", args.tokens.display()))?;
    let mut principals = parse_tokens(&text).map_err(anyhow::Error::msg)?;
    if let Some(n) = args.principals {
        anyhow::ensure!(
            n <= principals.len(),
            "--principals {n}: the file lists {}",
            principals.len()
        );
        principals.truncate(n);
    }
    let mut calls = Vec::with_capacity(principals.len());
    for (name, token) in principals {
        let a: Value = serde_json::from_str(&args.args.replace("{principal}", &name))
            .context("--args is not JSON")?;
        anyhow::ensure!(a.is_object(), "--args must be a JSON object");
        calls.push(Plan {
            name,
            token,
            args: a,
        });
    }
    let (addr, path) = endpoint(&args.url)?;
    let report = super::runtime()?.block_on(bench(&args, addr, path, calls))?;
    println!("{report}");
    Ok(ExitCode::SUCCESS)
}

/// One principal: its name, token and the arguments of its calls.
struct Plan {
    name: String,
    token: String,
    args: Value,
}

/// `PRINCIPAL TOKEN` lines, `#` comments and blank lines skipped.
fn parse_tokens(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut w = line.split_whitespace();
        match (w.next(), w.next(), w.next()) {
            (Some(p), Some(t), None) => out.push((p.to_string(), t.to_string())),
            _ => return Err(format!("tokens line {}: expected `PRINCIPAL TOKEN`", i + 1)),
        }
    }
    if out.is_empty() {
        return Err("the tokens file lists no principal".into());
    }
    Ok(out)
}

/// The address and path of an `http://` URL (no TLS: the load client measures the front).
fn endpoint(url: &str) -> anyhow::Result<(SocketAddr, String)> {
    let u = url::Url::parse(url).with_context(|| format!("--url {url}"))?;
    anyhow::ensure!(u.scheme() == "http", "--url must be http:// (got {url})");
    let addrs = u
        .socket_addrs(|| Some(80))
        .with_context(|| format!("cannot resolve {url}"))?;
    let addr = *addrs.first().context("the URL's host has no address")?;
    Ok((addr, u.path().to_string()))
}

/// A principal ready to call: its session and its connections, warmed up.
struct Ready {
    plan: Arc<Plan>,
    session: Arc<Session>,
    conns: Vec<Conn>,
}

/// What one connection's measured calls gave.
#[derive(Default)]
struct Tally {
    lat: Vec<Duration>,
    errors: usize,
    tool_errors: usize,
    first_errors: Vec<String>,
}

impl Tally {
    fn failed(&mut self, what: String) {
        self.errors += 1;
        if self.first_errors.len() < 3 {
            self.first_errors.push(what);
        }
    }
}

async fn bench(
    args: &BenchHttpArgs,
    addr: SocketAddr,
    path: String,
    plans: Vec<Plan>,
) -> anyhow::Result<Value> {
    let timeout = Duration::from_secs(args.timeout_secs);
    let n = plans.len();
    // Sessions first (each principal's first request starts its servers), then the clock.
    let gate = Arc::new(tokio::sync::Semaphore::new(args.init_concurrency));
    let mut starting = tokio::task::JoinSet::new();
    for plan in plans {
        let (gate, path) = (Arc::clone(&gate), path.clone());
        let (conns, warmup, tool) = (args.concurrency, args.warmup, args.tool.clone());
        starting.spawn(async move {
            let _permit = gate.acquire_owned().await;
            let started = Instant::now();
            let r = tokio::time::timeout(
                timeout * (1 + warmup as u32),
                prepare(addr, &path, plan, conns, warmup, &tool),
            )
            .await;
            (r, started.elapsed())
        });
    }
    let mut ready = Vec::with_capacity(n);
    let mut init_ms = Vec::with_capacity(n);
    let mut init_errors: Vec<String> = Vec::new();
    let mut init_failures = 0usize;
    while let Some(res) = starting.join_next().await {
        let (r, took) = res.context("a principal's task panicked")?;
        match r {
            Ok(Ok(p)) => {
                init_ms.push(took);
                ready.push(p);
            }
            Ok(Err(why)) => {
                init_failures += 1;
                if init_errors.len() < 5 {
                    init_errors.push(why);
                }
            }
            Err(_) => {
                init_failures += 1;
                if init_errors.len() < 5 {
                    init_errors.push(format!("session set-up timed out after {timeout:?}"));
                }
            }
        }
    }
    let pace = args
        .interval_ms
        .filter(|ms| *ms > 0.0)
        .map(|ms| Duration::from_secs_f64(ms / 1e3));
    let total: usize = ready.iter().map(|p| p.conns.len()).sum();
    let mut index = 0usize;
    let started = Instant::now();
    let base = tokio::time::Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    let mut sessions = Vec::with_capacity(ready.len());
    for p in ready {
        let per = args.calls / p.conns.len();
        let extra = args.calls % p.conns.len();
        for (w, conn) in p.conns.into_iter().enumerate() {
            let calls = per + usize::from(w < extra);
            let (plan, session, tool) = (
                Arc::clone(&p.plan),
                Arc::clone(&p.session),
                args.tool.clone(),
            );
            // Paced: this connection's k-th call starts at base + phase + k * interval.
            let phase = pace.map(|p| (p.mul_f64(index as f64 / total.max(1) as f64), p));
            index += 1;
            workers.spawn(async move {
                let mut conn = conn;
                let mut t = Tally::default();
                let mut id = (w as u64 + 1) << 32;
                for k in 0..calls {
                    if let Some((phase, every)) = phase {
                        tokio::time::sleep_until(base + phase + every * k as u32).await;
                    }
                    id += 1;
                    let t0 = Instant::now();
                    match tokio::time::timeout(
                        timeout,
                        session.call(&mut conn, id, &tool, &plan.args),
                    )
                    .await
                    {
                        Ok(Ok(Called::Ok)) => t.lat.push(t0.elapsed()),
                        Ok(Ok(Called::ToolError)) => t.tool_errors += 1,
                        Ok(Err(e)) => t.failed(format!("{}: {e}", plan.name)),
                        Err(_) => {
                            t.failed(format!("{}: call timed out after {timeout:?}", plan.name));
                            conn = Conn::new(addr);
                        }
                    }
                }
                (t, conn)
            });
        }
        sessions.push(p.session);
    }
    let mut all = Tally::default();
    let mut spare = Vec::new();
    while let Some(res) = workers.join_next().await {
        let (t, conn) = res.context("a bench worker panicked")?;
        all.lat.extend(t.lat);
        all.errors += t.errors;
        all.tool_errors += t.tool_errors;
        for e in t.first_errors {
            if all.first_errors.len() < 3 {
                all.first_errors.push(e);
            }
        }
        spare.push(conn);
    }
    let wall = started.elapsed();
    for (s, mut conn) in sessions.iter().zip(spare) {
        s.close(&mut conn).await;
    }
    let ok = all.lat.len();
    Ok(json!({
        "url": args.url,
        "tool": args.tool,
        "principals": n,
        "principalsReady": init_ms.len(),
        "initFailures": init_failures,
        "initErrors": init_errors,
        "callsPerPrincipal": args.calls,
        "concurrency": args.concurrency,
        "intervalMs": args.interval_ms,
        "ok": ok,
        "errors": all.errors,
        "toolErrors": all.tool_errors,
        "firstErrors": all.first_errors,
        "sessionSetupMs": {
            "median": round2(latency_us(&mut init_ms)["median"].as_f64().unwrap_or(0.0) / 1e3),
            "max": round2(init_ms.last().map_or(0.0, |d| d.as_secs_f64() * 1e3)),
        },
        "wallMs": round2(wall.as_secs_f64() * 1e3),
        "throughputPerSec": round2(if wall.is_zero() { 0.0 } else { ok as f64 / wall.as_secs_f64() }),
        "latencyUs": latency_us(&mut all.lat),
    }))
}

/// Opens the principal's session and its connections, each warmed up with `warmup` calls.
/// A failure is said with the principal's name (never its token).
async fn prepare(
    addr: SocketAddr,
    path: &str,
    plan: Plan,
    conns: usize,
    warmup: usize,
    tool: &str,
) -> Result<Ready, String> {
    let fail = |e: session::SessionError| format!("{}: {e}", plan.name);
    let mut first = Conn::new(addr);
    let session = Session::open(&mut first, path, &plan.token)
        .await
        .map_err(fail)?;
    let mut all = vec![first];
    all.extend((1..conns).map(|_| Conn::new(addr)));
    for (w, conn) in all.iter_mut().enumerate() {
        for i in 0..warmup {
            session
                .call(conn, ((w as u64) << 32) + i as u64 + 1, tool, &plan.args)
                .await
                .map_err(fail)?;
        }
    }
    Ok(Ready {
        plan: Arc::new(plan),
        session: Arc::new(session),
        conns: all,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tokens_file_is_principal_and_token_per_line() {
        let t = parse_tokens("# clear tokens\n\nalice a1\n bob  b2 \n").unwrap();
        assert_eq!(
            t,
            vec![("alice".into(), "a1".into()), ("bob".into(), "b2".into())]
        );
        assert!(parse_tokens("alice\n").is_err());
        assert!(parse_tokens("alice a b\n").is_err());
        assert!(parse_tokens("# none\n").is_err());
    }

    #[test]
    fn endpoint_is_http_only() {
        let (addr, path) = endpoint("http://127.0.0.1:8080/mcp").unwrap();
        assert_eq!(addr.to_string(), "127.0.0.1:8080");
        assert_eq!(path, "/mcp");
        assert!(endpoint("https://127.0.0.1:8080/mcp").is_err());
    }
}
