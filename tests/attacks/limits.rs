//! Resource limits: a fork bomb and a memory hog stopped at the cgroup's limits behind
//! `palisade serve`, each server restarted with the reason given to the agent, while the peer
//! server and the gateway keep working.

use std::time::Duration;

use palisade::client::{result_text, McpClient};
use serde_json::{json, Value};

use crate::scene::*;
use crate::skip;

/// Resource limits: a fork bomb and a memory hog in the hostile server, with `sandbox.limits`
/// set low. The control (the same server launched directly) reaches both targets; behind
/// palisade the fork bomb is refused at the cgroup's task limit and the memory hog is
/// killed, each server restarted with the reason given to the agent, and the peer server and
/// the gateway keep working throughout. Needs a cgroup (without one, tests/limits.rs covers
/// the rlimit fallbacks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_bomb_and_memory_hog_are_stopped_and_the_rest_keeps_working() {
    if !check_says_cgroup() {
        skip::host_skip(
            "attacks::fork_bomb_and_memory_hog_are_stopped_and_the_rest_keeps_working",
            "palisade check: servers get no cgroup on this machine",
        );
        return;
    }
    let sc = scene().await;
    let log = sc.p("limits-stderr.log");
    const BOMB: u64 = 300;
    const HOG_MB: u64 = 768;

    // Control: no limits, both reach their targets.
    let direct = client(
        &sc,
        vec![
            venv_python().display().to_string(),
            attacks_dir()
                .join("hostile_server.py")
                .display()
                .to_string(),
            sc.cfg.to_string(),
        ],
        &log,
    )
    .await;
    let (bomb_ok, bomb) = call(&direct, "fork_bomb", json!({"limit": BOMB})).await;
    assert!(bomb_ok, "control fork bomb must reach {BOMB}: {bomb}");
    let (hog_ok, hog) = call(&direct, "memory_hog", json!({"mb": HOG_MB})).await;
    assert!(hog_ok, "control memory hog must succeed: {hog}");
    direct.shutdown().await;

    let config = write_config(&sc, "bwrap", false);
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    cfg["mcpServers"]["hostile"]["sandbox"]["limits"] = json!({"memoryMb": 256, "processes": 64});
    std::fs::write(&config, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    let gw = client(
        &sc,
        vec![
            env!("CARGO_BIN_EXE_palisade").to_string(),
            "serve".into(),
            "--config".into(),
            config.display().to_string(),
        ],
        &log,
    )
    .await;
    assert!(peer_works(&sc, &gw).await, "peer must work before");

    let (bomb_ok, bomb) = call(&gw, "hostile__fork_bomb", json!({"limit": BOMB})).await;
    // Refused forks (EAGAIN), or the server already stopped for hitting the limit.
    assert!(
        !bomb_ok
            && (bomb.contains("refused: [Errno 11]") || bomb.contains("process limit reached")),
        "the task limit must refuse forks: {bomb}"
    );
    assert!(
        peer_works(&sc, &gw).await,
        "peer must work after the fork bomb"
    );
    // The server that hit its task limit is restarted; the agent is told why meanwhile.
    let (back, bomb_told) = until_restarted(&gw, &log, 0).await;
    assert!(back, "hostile must be restarted: {bomb_told:?}");
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        bomb_told
            .iter()
            .any(|t| t.contains("process limit reached (64 processes"))
            || stderr.contains("process limit reached (64 processes"),
        "the restart reason must name the task limit: {bomb_told:?}\n{stderr}"
    );

    let before_hog = restarts(&log);
    let (hog_ok, hog) = call(&gw, "hostile__memory_hog", json!({"mb": HOG_MB})).await;
    assert!(!hog_ok, "the memory limit must stop the hog: {hog}");
    // Poll until the server is back; the agent must have been told why on the way.
    let (back, mut told) = until_restarted(&gw, &log, before_hog).await;
    told.insert(0, hog.clone());
    assert!(back, "hostile must be restarted: {told:?}");
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        told.iter().any(|t| t.contains("memory limit reached"))
            || stderr.contains("memory limit reached"),
        "the restart reason must name the memory limit: {told:?}\n{stderr}"
    );
    assert!(
        peer_works(&sc, &gw).await,
        "peer must work after the memory hog"
    );
    println!(
        "fork bomb: {bomb}\nagent was told: {bomb_told:?}\nmemory hog: {hog}\nagent was told: {told:?}"
    );
    gw.shutdown().await;
}

/// Polls `own_env` until the hostile server answers again after going down (at most 15 s),
/// collecting what the agent is told meanwhile. A call made while the server restarts waits
/// for it, so "back" is: the gateway logged one more restart than `restarts_before`, and a
/// call then succeeds.
async fn until_restarted(
    gw: &McpClient,
    log: &std::path::Path,
    restarts_before: usize,
) -> (bool, Vec<String>) {
    let mut told: Vec<String> = Vec::new();
    for _ in 0..300 {
        match gw.call_tool("hostile__own_env", json!({})).await {
            Ok(r) if r.is_error != Some(true) => {
                if restarts(log) > restarts_before {
                    return (true, told);
                }
            }
            Ok(r) => told.push(result_text(&r)),
            Err(e) => told.push(e.to_string()),
        }
        told.dedup();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (false, told)
}

/// How many restarts the gateway has logged ("down: REASON; restart N/M in S").
fn restarts(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches("; restart ")
        .count()
}

/// A read inside the peer's own root through the gateway: true when it works.
async fn peer_works(sc: &Scene, gw: &McpClient) -> bool {
    call(
        gw,
        "peer__read_path",
        json!({"path": sc.p("peer/secret.txt")}),
    )
    .await
    .0
}
