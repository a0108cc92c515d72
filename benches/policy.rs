//! Policy evaluation and audit append throughput.
//! Run: `cargo bench --bench policy` (figures go to docs/policy.md).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::path::{Path, PathBuf};

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use palisade::audit::{AuditLog, AuditRecord, CallResult, PolicyDecisionRecord, ResultStatus};
use palisade::gateway::{CallOutcome, CallRecord, LogAudit, PolicyVerdict};
use palisade::policy::{CallContext, Policy, PolicyOptions, PolicyPaths, Scope, Status};
use palisade::sandbox::launch::Enforcement;
use serde_json::json;

fn corpus() -> PathBuf {
    std::env::var_os("PALISADE_CORPUS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ironcurtain"),
        PathBuf::from,
    )
}

fn bench_policy(c: &mut Criterion) {
    let cfg = corpus().join("src/config/generated");
    let policy = Policy::load(
        &PolicyPaths {
            policy: Some(cfg.join("compiled-policy.json")),
            annotations: Some(cfg.join("tool-annotations.json")),
            lists: Some(cfg.join("dynamic-lists.json")),
        },
        PolicyOptions {
            home: Some("/home/provos".into()),
            ..Default::default()
        },
    )
    .unwrap();
    let home = Path::new("/home/provos");
    let scope = Scope::new(
        Some(Path::new("/home/provos/.ironcurtain/sandbox")),
        &[PathBuf::from("/home/provos/.ironcurtain")],
        Some(home),
    )
    .unwrap();
    // A non-path call isolates engine cost from canonicalisation syscalls.
    let fetch = json!({"url": "https://www.nytimes.com/section/world"});
    let fetch = fetch.as_object().unwrap();
    c.bench_function("corpus policy (36 rules): http_fetch via list", |b| {
        b.iter(|| {
            black_box(policy.evaluate(&CallContext {
                server: "fetch",
                tool: "http_fetch",
                arguments: fetch,
                cwd: None,
                home: Some(home),
                scope: &scope,
                roots: &[],
            }))
        })
    });
    let read = json!({"path": "/home/provos/Downloads/report.pdf"});
    let read = read.as_object().unwrap();
    c.bench_function(
        "corpus policy (36 rules): read_file incl. canonicalisation",
        |b| {
            b.iter(|| {
                black_box(policy.evaluate(&CallContext {
                    server: "filesystem",
                    tool: "read_file",
                    arguments: read,
                    cwd: None,
                    home: Some(home),
                    scope: &scope,
                    roots: &[],
                }))
            })
        },
    );

    // Generated policies: N rules spread over 100 servers x 10 tools, each a path rule.
    for n in [1_000usize, 10_000] {
        let dir = tempfile::tempdir().unwrap();
        let rules: Vec<_> = (0..n)
            .map(|i| json!({"name": format!("r{i}"),
                "if": {"server": [format!("s{}", i % 100)], "tool": [format!("t{}", (i / 100) % 10)],
                       "paths": {"roles": ["read-path"], "within": format!("/data/{i}")}},
                "then": "allow", "reason": "gen"}))
            .collect();
        let tools: Vec<_> = (0..10)
            .map(|t| json!({"toolName": format!("t{t}"), "args": {"p": ["read-path"]}}))
            .collect();
        let servers: serde_json::Map<_, _> = (0..100)
            .map(|s| (format!("s{s}"), json!({"tools": tools})))
            .collect();
        std::fs::write(
            dir.path().join("p.json"),
            json!({"rules": rules}).to_string(),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("a.json"),
            json!({"servers": servers}).to_string(),
        )
        .unwrap();
        let p = Policy::load(
            &PolicyPaths {
                policy: Some(dir.path().join("p.json")),
                annotations: Some(dir.path().join("a.json")),
                lists: None,
            },
            PolicyOptions::default(),
        )
        .unwrap();
        let args = json!({"p": format!("/data/{}/x", n - 1)});
        let args = args.as_object().unwrap();
        let server = format!("s{}", (n - 1) % 100);
        let tool = format!("t{}", ((n - 1) / 100) % 10);
        let empty = Scope::default();
        c.bench_function(
            &format!("generated policy ({n} rules): last rule matches"),
            |b| {
                b.iter(|| {
                    black_box(p.evaluate(&CallContext {
                        server: &server,
                        tool: &tool,
                        arguments: args,
                        cwd: None,
                        home: None,
                        scope: &empty,
                        roots: &[],
                    }))
                })
            },
        );
    }
}

fn bench_audit(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(&dir.path().join("audit.jsonl")).unwrap();
    let rec = AuditRecord {
        timestamp: "2026-11-21T10:00:00.000Z".into(),
        request_id: "req-1".into(),
        server_name: "filesystem".into(),
        tool_name: "read_file".into(),
        arguments: json!({"path": "/home/u/Downloads/report.pdf"}),
        policy_decision: PolicyDecisionRecord {
            status: Status::Allow,
            rule: "allow-read-downloads".into(),
            reason: "Policy permits reading in Downloads".into(),
        },
        escalation_result: None,
        escalation_decided_by: None,
        result: CallResult {
            status: ResultStatus::Success,
            error: None,
        },
        duration_ms: 2,
        sandboxed: true,
        sandbox_backend: Some("bwrap".into()),
        degradation: vec![],
        approved_roots: vec![],
        network_refusals: vec![],
        remembered_scope: None,
        approved_by_scope: None,
        kind: None,
        principal: None,
        task_id: None,
        task_status: None,
        protocol: None,
    };
    c.bench_function("audit append+flush (redacted, chained)", |b| {
        b.iter(|| log.append(black_box(&rec)).unwrap())
    });
}

/// The record the gateway logs to stderr for each call when no audit file is configured
/// (the default, and `scripts/bench.sh`'s per-call rows): built, redacted, capped, as text.
fn bench_log_line(c: &mut Criterion) {
    let mut args = serde_json::Map::new();
    args.insert("path".into(), json!("/home/u/Downloads/report.pdf"));
    let rec = CallRecord::new(
        palisade::gateway::stages::RecordServer::unstamped("filesystem"),
        "read_file",
        "17".into(),
        args,
        PolicyVerdict::allow("Policy permits reading in Downloads"),
        CallOutcome::Success,
    )
    .enforced(Some(Enforcement::Sandboxed {
        backend: palisade::config::Backend::Bwrap,
    }));
    c.bench_function("audit record as a log line (redacted, capped)", |b| {
        b.iter(|| LogAudit::line(black_box(&rec)).unwrap())
    });
}

criterion_group!(benches, bench_policy, bench_audit, bench_log_line);
criterion_main!(benches);
