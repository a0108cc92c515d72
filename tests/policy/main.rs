//! The policy engine against IronCurtain's corpus and against small policies written to
//! exercise one rule of the semantics each.
//!
//! One test binary, one module per subject: `corpus` (IronCurtain's policies, scenarios and
//! the roots derived from them), `rules` (one rule of the semantics per test), `defaults`
//! (load errors, the built-in default policy, protected files), `cli` (`palisade policy
//! explain` and `test`). The corpus loaders and the small policies they share are here.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod cli;
mod corpus;
mod defaults;
mod rules;

use std::path::{Path, PathBuf};

use palisade::policy::scenarios;
use palisade::policy::{CallContext, Decision, Policy, PolicyOptions, PolicyPaths, Scope, Status};
use serde_json::{json, Value};

fn corpus() -> PathBuf {
    std::env::var_os("PALISADE_CORPUS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ironcurtain"),
        PathBuf::from,
    )
}

fn cfg(dir: &str) -> PathBuf {
    corpus().join("src/config").join(dir)
}

const HOME: &str = "/home/provos";
const SANDBOX: &str = "/home/provos/.ironcurtain/sandbox";

/// IronCurtain's verifier setting: HOME=/home/provos, sandbox ~/.ironcurtain/sandbox,
/// ~/.ironcurtain protected.
fn verifier_env() -> scenarios::Env {
    scenarios::Env {
        home: Some(HOME.into()),
        cwd: None,
        scope: Scope::new(
            Some(Path::new(SANDBOX)),
            &[PathBuf::from("/home/provos/.ironcurtain")],
            Some(Path::new(HOME)),
        )
        .unwrap(),
    }
}

fn corpus_policy(dir: &str) -> Policy {
    let lists = cfg(dir).join("dynamic-lists.json");
    Policy::load(
        &PolicyPaths {
            policy: Some(cfg(dir).join("compiled-policy.json")),
            annotations: Some(cfg("generated").join("tool-annotations.json")),
            lists: lists.exists().then_some(lists),
        },
        PolicyOptions {
            home: Some(HOME.into()),
            ..Default::default()
        },
    )
    .unwrap()
}

fn eval(p: &Policy, env: &scenarios::Env, server: &str, tool: &str, args: Value) -> Decision {
    let args = args.as_object().unwrap().clone();
    p.evaluate(&CallContext {
        server,
        tool,
        arguments: &args,
        cwd: env.cwd.as_deref(),
        home: env.home.as_deref(),
        scope: &env.scope,
        roots: &[],
    })
}

fn check(d: &Decision, status: Status, rule: &str) {
    assert_eq!((d.status, d.rule.as_str()), (status, rule), "{d:?}");
}

/// A small policy written to a temp dir.
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    policy: Policy,
}

fn fixture(rules: Value, annotations: Value, lists: Option<Value>) -> Fixture {
    fixture_with(rules, annotations, lists, PolicyOptions::default())
}

fn fixture_with(
    rules: Value,
    annotations: Value,
    lists: Option<Value>,
    options: PolicyOptions,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let text = serde_json::to_string(&json!({"rules": rules})).unwrap();
    let text = text.replace("$ROOT", root.to_str().unwrap());
    std::fs::write(root.join("p.json"), text).unwrap();
    std::fs::write(
        root.join("a.json"),
        serde_json::to_string(&json!({"servers": annotations})).unwrap(),
    )
    .unwrap();
    let lists_path = lists.map(|l| {
        std::fs::write(
            root.join("l.json"),
            serde_json::to_string(&json!({"lists": l})).unwrap(),
        )
        .unwrap();
        root.join("l.json")
    });
    let policy = Policy::load(
        &PolicyPaths {
            policy: Some(root.join("p.json")),
            annotations: Some(root.join("a.json")),
            lists: lists_path,
        },
        options,
    )
    .unwrap();
    Fixture {
        _dir: dir,
        root,
        policy,
    }
}

fn tool(name: &str, args: Value) -> Value {
    json!({"toolName": name, "args": args})
}

fn env_with(scope: Scope) -> scenarios::Env {
    scenarios::Env {
        home: Some("/home/u".into()),
        cwd: None,
        scope,
    }
}
