//! The package runners as the servers' READMEs give them, under `palisade run`: the first use
//! fetches and locks, later uses start offline from the lock; versions pinned in the arguments
//! are honoured; a first use without a registry fails at once, naming the package and the fix.

use serde_json::json;

use crate::*;

#[test]
fn npx_yes_server_memory_runs_sandboxed_then_starts_offline_from_the_lock() {
    let home = Home::new();
    let argv = ["npx", "-y", "@modelcontextprotocol/server-memory"];
    let (tools, err) = run_server(&home, &argv, false);
    assert!(has(&tools, "create_entities"), "{tools:?}\n{err}");
    assert!(
        err.contains("fetching @modelcontextprotocol/server-memory"),
        "{err}"
    );
    let locked = &home.lock()["packages"]["npm:@modelcontextprotocol/server-memory@latest"];
    let version = locked["version"].as_str().unwrap().to_string();
    assert!(
        locked["integrity"].as_str().unwrap().starts_with("sha512-"),
        "{locked}"
    );
    // The registry is gone: the locked version starts, nothing is fetched.
    let (tools, err) = run_server(&home, &argv, true);
    assert!(has(&tools, "create_entities"), "{tools:?}\n{err}");
    assert!(!err.contains("fetching"), "{err}");
    assert_eq!(
        home.lock()["packages"]["npm:@modelcontextprotocol/server-memory@latest"]["version"],
        json!(version)
    );
}

/// The issue's own example: a filesystem server wrapped in place, its directory granted.
#[test]
fn npx_yes_server_filesystem_wrapped_in_place_serves_its_granted_directory() {
    let home = Home::new();
    let project = home.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("hello.txt"), "hi").unwrap();
    let dir = project.to_str().unwrap();
    let mut c = Client::start(home.palisade(
        &[
            "run",
            "--rw",
            dir,
            "--",
            "npx",
            "-y",
            "@modelcontextprotocol/server-filesystem",
            dir,
        ],
        false,
    ));
    let tools = c.tools();
    assert!(has(&tools, "list_directory"), "{tools:?}");
    c.send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "list_directory", "arguments": {"path": dir}}}),
    );
    let listed = c.response(3);
    let err = c.finish();
    assert!(listed.to_string().contains("hello.txt"), "{listed}\n{err}");
}

#[test]
fn uvx_mcp_server_time_runs_sandboxed_then_starts_offline_from_the_lock() {
    let home = Home::new();
    let argv = ["uvx", "mcp-server-time"];
    let (tools, err) = run_server(&home, &argv, false);
    assert!(has(&tools, "get_current_time"), "{tools:?}\n{err}");
    let locked = &home.lock()["packages"]["pypi:mcp-server-time@latest"];
    assert!(locked["version"].is_string(), "{locked}");
    let (tools, err) = run_server(&home, &argv, true);
    assert!(has(&tools, "get_current_time"), "{tools:?}\n{err}");
    assert!(!err.contains("fetching"), "{err}");
}

#[test]
fn pinned_versions_in_the_args_are_honoured() {
    let home = Home::new();
    let (tools, err) = run_server(
        &home,
        &["npx", "-y", "@modelcontextprotocol/server-memory@2026.7.4"],
        false,
    );
    assert!(has(&tools, "create_entities"), "{tools:?}\n{err}");
    let (tools, err) = run_server(&home, &["uvx", "mcp-server-time@2026.8.18"], false);
    assert!(has(&tools, "get_current_time"), "{tools:?}\n{err}");
    let lock = home.lock();
    assert_eq!(
        lock["packages"]["npm:@modelcontextprotocol/server-memory@=2026.7.4"]["version"],
        "2026.7.4"
    );
    assert_eq!(
        lock["packages"]["pypi:mcp-server-time@=2026.8.18"]["version"],
        "2026.8.18"
    );
}

#[test]
fn a_first_fetch_without_a_registry_fails_at_once_naming_the_package_and_the_fix() {
    let home = Home::new();
    for argv in [
        &[
            "npx",
            "-y",
            "@modelcontextprotocol/server-filesystem",
            "/tmp",
        ][..],
        &["uvx", "mcp-server-time"][..],
    ] {
        let mut args = vec!["run", "--"];
        args.extend_from_slice(argv);
        let out = output(home.palisade(&args, true));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(out.stdout.is_empty(), "nothing on the MCP channel");
        let package = argv[argv.len() - 1 - usize::from(argv[0] == "npx")];
        assert!(err.contains(&format!("`{package}`")), "{err}");
        assert!(err.contains("palisade prefetch"), "{err}");
        assert!(
            err.contains("127.0.0.1:9"),
            "the client's cause is shown: {err}"
        );
    }
}
