//! How a server given on the command line (`serve -- CMD ARGS`) is named and configured.
//! Pure.

use super::*;

fn name(cmd: &str, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    one_server_name(cmd, &args)
}

#[test]
fn a_command_line_server_is_named_after_what_it_runs() {
    assert_eq!(
        name(
            "npx",
            &["-y", "@modelcontextprotocol/server-filesystem", "/srv"]
        ),
        "server-filesystem"
    );
    assert_eq!(name("uvx", &["mcp-server-git"]), "mcp-server-git");
    assert_eq!(name("python3", &["-m", "server.py"]), "server");
    assert_eq!(name("/usr/local/bin/my.server", &[]), "my-server");
    assert_eq!(name("npx", &["-y", "@scope/pkg@1.2.3"]), "pkg");
    assert_eq!(name("node", &[]), "node");
    assert_eq!(
        name(
            "node",
            &[
                "/x/node_modules/@m/server-everything/dist/index.js",
                "stdio"
            ]
        ),
        "server-everything"
    );
}

#[test]
fn one_server_config_keeps_names_and_parses() {
    let v = one_server_config("node", &["s.js".to_string()], &OneServerGrants::default());
    let c = crate::config::parse_str(&v.to_string(), "t").unwrap();
    assert_eq!(c.servers.len(), 1);
    assert_eq!(c.servers[0].0, "s");
    assert_eq!(c.servers[0].1.prefix, Some(false));
}

#[test]
fn one_server_grants_become_its_sandbox_filesystem() {
    let grants = OneServerGrants {
        rw: vec![PathBuf::from("/srv/project")],
        ro: vec![PathBuf::from("/srv/docs")],
    };
    let v = one_server_config("node", &["s.js".to_string()], &grants);
    let c = crate::config::parse_str(&v.to_string(), "t").unwrap();
    let crate::config::SandboxSetting::Enabled(sandbox) = &c.servers[0].1.sandbox else {
        panic!("sandboxed");
    };
    assert_eq!(sandbox.filesystem.allow_write, vec!["/srv/project"]);
    assert_eq!(sandbox.filesystem.allow_read, vec!["/srv/docs"]);
    assert_eq!(c.servers[0].1.prefix, Some(false));
}
