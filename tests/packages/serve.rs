//! Package-runner servers under `palisade serve`: configs as the READMEs give them, offline
//! after a prefetch; only the server whose package cannot be fetched is refused; `check`
//! reports servers not fetched yet; `docker run` is refused in enforce.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::*;

#[test]
fn serve_config_as_the_readmes_give_it_then_offline_after_prefetch() {
    let home = Home::new();
    let config = home.path().join("config.json");
    support::write_json(
        &config,
        &json!({"mcpServers": {
            "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
            "time": {"command": "uvx", "args": ["mcp-server-time"]}
        }}),
    );
    let cfg = config.to_str().unwrap();
    let out = output(home.palisade(&["prefetch", "--config", cfg], false));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("memory: npm @modelcontextprotocol/server-memory"),
        "{text}"
    );
    assert!(text.contains("time: pypi mcp-server-time"), "{text}");
    let sandbox_dir = home.path().join("sb");
    let policy = support::allow_all_policy();
    let serve = |offline| {
        home.palisade(
            &[
                "serve",
                "--config",
                cfg,
                "--sandbox-dir",
                sandbox_dir.to_str().unwrap(),
                "--policy",
                policy.to_str().unwrap(),
            ],
            offline,
        )
    };
    let mut c = Client::start(serve(true));
    let tools = c.tools();
    let err = c.finish();
    assert!(has(&tools, "create_entities"), "{tools:?}\n{err}");
    assert!(has(&tools, "get_current_time"), "{tools:?}\n{err}");
    assert!(!err.contains("fetching"), "{err}");
    // --refresh resolves the unpinned packages again (the registry is back).
    let out = output(home.palisade(&["prefetch", "--refresh", "--config", cfg], false));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("(fetched,").count(), 2, "{text}");
    // Without --refresh nothing is fetched.
    let out = output(home.palisade(&["prefetch", "--config", cfg], true));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("(cached,").count(), 2, "{text}");
}

/// Regression: under `serve`, a package that could not be fetched stopped the whole gateway.
/// Now that server alone is refused (named in the log with the fix) and the others start: the
/// agent lists and calls palisade's own fs-server beside it.
#[test]
fn serve_refuses_only_the_server_whose_package_cannot_be_fetched() {
    let home = Home::new();
    let config = home.path().join("config.json");
    support::write_json(
        &config,
        &json!({"mcpServers": {
            "everything": {"command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-everything"]},
            "fs": {"command": support::palisade(), "args": ["fs-server"]}
        }}),
    );
    let sandbox_dir = home.path().join("sb");
    std::fs::create_dir_all(&sandbox_dir).unwrap();
    std::fs::write(sandbox_dir.join("marker.txt"), "m").unwrap();
    // The registry is unreachable and the cache empty.
    let mut c = Client::start(serve(&home, &config, true));
    let tools = c.tools();
    let list = named(&tools, "__list").to_string();
    assert!(
        !tools.iter().any(|t| t.starts_with("everything")),
        "{tools:?}"
    );
    let listed = c.call(3, &list, json!({"path": sandbox_dir.to_str().unwrap()}));
    // A call to the refused server's tool says why it is not there.
    let refused = c.call(4, "everything__echo", json!({"message": "hi"}));
    let err = c.finish();
    let why = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        why.contains("was not started") && why.contains("palisade prefetch"),
        "{refused}"
    );
    assert_ok(&listed, &err);
    assert!(listed.to_string().contains("marker.txt"), "{listed}\n{err}");
    // The reason runs over two lines: the package and cause, then the fix.
    let at = err
        .find("not started: cannot fetch npm package")
        .unwrap_or_else(|| panic!("the failed server is not reported: {err}"));
    let refusal = &err[at..];
    let server = refusal.find("server=").map(|i| &refusal[i..]);
    assert!(
        server.is_some_and(|s| s.starts_with("server=everything")),
        "the server is named: {refusal}"
    );
    assert!(
        refusal.contains("`@modelcontextprotocol/server-everything`")
            && refusal.contains("fix: run `palisade prefetch"),
        "the package and the fix are named: {refusal}"
    );
}

/// The other servers of the list, each with its config exactly as its README gives
/// it (the version pinned to the one the test deps install), under `serve`: tools listed and
/// one simple call each (mcp-server-fetch: the list only, a real fetch needs egress); then
/// with the registry unreachable, under `serve` and `run`, from the lock. One test, so each
/// package is fetched once per run of this binary.
#[test]
fn serve_everything_sequential_thinking_and_fetch_as_their_readmes_give_them() {
    let home = Home::new();
    let config = home.path().join("config.json");
    support::write_json(
        &config,
        &json!({"mcpServers": {
            "everything": {"command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-everything@2026.8.31"]},
            "sequential-thinking": {"command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-sequential-thinking@2026.8.31"]},
            "fetch": {"command": "uvx", "args": ["mcp-server-fetch@2026.10.24"]}
        }}),
    );
    let mut c = Client::start(serve(&home, &config, false));
    let tools = c.tools();
    let echo = named(&tools, "__echo").to_string();
    let think = named(&tools, "__sequentialthinking").to_string();
    assert!(has(&tools, "fetch__fetch"), "{tools:?}");
    let echoed = c.call(3, &echo, json!({"message": "through the cache"}));
    let thought = c.call(
        4,
        &think,
        json!({"thought": "one step", "nextThoughtNeeded": false,
            "thoughtNumber": 1, "totalThoughts": 1}),
    );
    let err = c.finish();
    assert_ok(&echoed, &err);
    assert!(echoed.to_string().contains("through the cache"), "{echoed}");
    assert_ok(&thought, &err);
    assert!(thought.to_string().contains("thoughtNumber"), "{thought}");
    assert!(err.contains("fetching"), "fetched on first use: {err}");
    let lock = home.lock();
    for (key, version) in [
        (
            "npm:@modelcontextprotocol/server-everything@=2026.8.31",
            "2026.8.31",
        ),
        (
            "npm:@modelcontextprotocol/server-sequential-thinking@=2026.8.31",
            "2026.8.31",
        ),
        ("pypi:mcp-server-fetch@=2026.10.24", "2026.10.24"),
    ] {
        assert_eq!(lock["packages"][key]["version"], version, "{lock}");
    }
    // The registry is gone: under `serve` and under `run`, each starts its locked version.
    let mut c = Client::start(serve(&home, &config, true));
    let offline = c.tools();
    let err = c.finish();
    for want in ["__echo", "__sequentialthinking", "fetch__fetch"] {
        assert!(has(&offline, want), "{offline:?}\n{err}");
    }
    assert!(!err.contains("fetching"), "{err}");
    for (argv, want) in [
        (
            &[
                "npx",
                "-y",
                "@modelcontextprotocol/server-everything@2026.8.31",
            ][..],
            "echo",
        ),
        (
            &[
                "npx",
                "-y",
                "@modelcontextprotocol/server-sequential-thinking@2026.8.31",
            ][..],
            "sequentialthinking",
        ),
        (&["uvx", "mcp-server-fetch@2026.10.24"][..], "fetch"),
    ] {
        let (tools, err) = run_server(&home, argv, true);
        assert!(has(&tools, want), "{argv:?}: {tools:?}\n{err}");
        assert!(!err.contains("fetching"), "{err}");
    }
    // `check` reports each package as locked, with its cache entry; no fetch.
    let out = output(home.palisade(
        &["check", "--json", "--config", config.to_str().unwrap()],
        true,
    ));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    for server in report["servers"].as_array().unwrap() {
        let p = &server["package"];
        assert!(p["version"].is_string(), "{server}");
        let entry = PathBuf::from(p["entry"].as_str().unwrap());
        assert!(
            entry.starts_with(home.cache()) && entry.is_dir(),
            "{server}"
        );
    }
}

/// `palisade check --config` names each package runner server's package and, before any
/// fetch, says it is not fetched yet and how to fix that; plain servers have no package.
#[test]
fn check_reports_package_runner_servers_not_fetched_yet_with_the_fix() {
    let home = Home::new();
    let config = home.path().join("config.json");
    support::write_json(
        &config,
        &json!({"mcpServers": {
            "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
            "time": {"command": "uvx", "args": ["mcp-server-time"]},
            "fs": {"command": support::palisade(), "args": ["fs-server"]}
        }}),
    );
    let cfg = config.to_str().unwrap();
    let out = output(home.palisade(&["check", "--config", cfg], true));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "package: npm @modelcontextprotocol/server-memory (`npx`): not fetched yet: run \
             `palisade prefetch"
        ),
        "{text}"
    );
    assert!(
        text.contains("package: pypi mcp-server-time (`uvx`): not fetched yet"),
        "{text}"
    );
    // The fix names this config, not a placeholder.
    assert!(
        text.contains(&format!("`palisade prefetch --config {cfg}`")),
        "{text}"
    );
    assert_eq!(text.matches("package:").count(), 2, "fs has none: {text}");
    let out = output(home.palisade(&["check", "--json", "--config", cfg], true));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let servers = report["servers"].as_array().unwrap();
    assert_eq!(
        servers[0]["package"]["package"],
        "@modelcontextprotocol/server-memory"
    );
    assert_eq!(servers[0]["package"]["ecosystem"], "npm");
    assert!(servers[0]["package"]["version"].is_null());
    assert!(servers[0]["package"]["problem"]
        .as_str()
        .unwrap()
        .contains("palisade prefetch"));
    assert!(servers[2].get("package").is_none(), "{}", servers[2]);
    assert!(
        !home.cache().join("lock.json").exists(),
        "check never fetches"
    );
}

#[test]
fn docker_run_is_refused_in_enforce_and_runs_uncontained_in_warn() {
    let home = Home::new();
    let out = output(home.palisade(
        &["run", "--", "docker", "run", "-i", "--rm", "mcp/time"],
        true,
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("docker daemon"), "{err}");
    let out = output(home.palisade(
        &[
            "run",
            "--sandbox-policy",
            "warn",
            "--",
            "docker",
            "run",
            "-i",
            "--rm",
            "mcp/time",
        ],
        true,
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("UNCONTAINED"), "{err}");
}
