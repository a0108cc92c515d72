//! Reading and validating a configuration file. Errors name the file, the JSON path of the
//! offending field and, where there is one, the fix.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::types::{GatewayConfig, ServerConfig, Settings};

/// A configuration error that names where it happened.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{file}: invalid JSON: {message}")]
    Syntax { file: String, message: String },
    #[error("{file}: field `{field}`: {message}")]
    Field {
        file: String,
        field: String,
        message: String,
    },
}

/// Loads and validates a configuration file.
pub fn load_file(path: &Path) -> Result<GatewayConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        cause: source,
    })?;
    parse_str(&text, &path.display().to_string())
}

/// A server's sandbox paths must say where they are: absolute, under the home (`~/`), a
/// `file://` URI, or relative to the server's own absolute `cwd` when it has one (the
/// caller's working directory is not the server's). `Err`: the entry's field
/// (`...allowWrite[0]`) and why.
fn check_sandbox_paths(
    fs: &super::types::FilesystemConfig,
    field: &str,
    cwd: Option<&str>,
) -> Result<(), (String, String)> {
    let has_cwd = cwd.is_some_and(|c| c.starts_with('/'));
    let lists = [
        ("allowWrite", &fs.allow_write),
        ("allowRead", &fs.allow_read),
        ("denyRead", &fs.deny_read),
        ("denyWrite", &fs.deny_write),
    ];
    for (key, list) in lists {
        for (i, p) in list.iter().enumerate() {
            let anchored = p.starts_with('/')
                || p == "~"
                || p.starts_with("~/")
                || crate::roots::uri::is_file_uri(p)
                || has_cwd;
            if !anchored {
                return Err((
                    format!("{field}.{key}[{i}]"),
                    format!(
                        "`{p}` is relative and the server has no absolute `cwd`: give an absolute \
                         path, one under the home (`~/...`), or the server a `cwd`"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The `palisade` block's fields that hold paths (`http.` ones inside its `http` block).
const SETTINGS_PATHS: &[&str] = &[
    "auditLog",
    "sandboxDir",
    "policy",
    "annotations",
    "lists",
    "protectedPaths",
    "profilesDir",
    "pins",
    "egressHostsFile",
    "stateDir",
    "http.tokens",
    "http.jwks",
    "http.jwksCa",
];

/// `~` and `~/...` at the start of the `palisade` block's paths made `home` and below it (as
/// a shell would; the docs' own example writes `~/.local/state/...`). `Err`: the field
/// (`palisade.auditLog`) of a `~` path when there is no home.
fn expand_home(settings: &mut Value, home: Option<&Path>) -> Result<(), String> {
    for field in SETTINGS_PATHS {
        let slot = match field.split_once('.') {
            Some((block, key)) => settings.get_mut(block).and_then(|b| b.get_mut(key)),
            None => settings.get_mut(*field),
        };
        let values: Vec<&mut Value> = match slot {
            Some(Value::Array(items)) => items.iter_mut().collect(),
            Some(v) => vec![v],
            None => continue,
        };
        for v in values {
            let Some(text) = v.as_str() else { continue };
            let rest = match text.strip_prefix('~') {
                Some("") => "",
                Some(r) if r.starts_with('/') => r.trim_start_matches('/'),
                _ => continue,
            };
            let home = home
                .filter(|h| !h.as_os_str().is_empty())
                .ok_or_else(|| format!("palisade.{field}"))?;
            let expanded = if rest.is_empty() {
                home.to_path_buf()
            } else {
                home.join(rest)
            };
            *v = Value::String(expanded.display().to_string());
        }
    }
    Ok(())
}

/// Parses configuration text; `file` is only used in error messages.
pub fn parse_str(text: &str, file: &str) -> Result<GatewayConfig, ConfigError> {
    let mut value: Value = serde_json::from_str(text).map_err(|e| ConfigError::Syntax {
        file: file.to_string(),
        message: e.to_string(),
    })?;
    strip_comments(&mut value);
    let field_err = |field: &str, message: String| ConfigError::Field {
        file: file.to_string(),
        field: field.to_string(),
        message,
    };
    let Value::Object(mut top) = value else {
        return Err(field_err(
            "(top level)",
            "expected an object: {\"mcpServers\": {NAME: {\"command\": ...}}}".into(),
        ));
    };

    let settings = match top.remove("palisade") {
        Some(mut v) => {
            let home = std::env::var_os("HOME").map(PathBuf::from);
            expand_home(&mut v, home.as_deref()).map_err(|field| {
                let why = "starts with `~` but HOME is not set: give an absolute path";
                field_err(&field, why.into())
            })?;
            decode::<Settings>(v, "palisade", file)?
        }
        None => Settings::default(),
    };

    // Claude Desktop's shape has `mcpServers`; IronCurtain writes the server map flat.
    let (servers_obj, prefix) = match top.remove("mcpServers") {
        Some(Value::Object(map)) => {
            if let Some(extra) = top.keys().next() {
                return Err(field_err(
                    extra,
                    "unknown top-level key (expected only `mcpServers`, `palisade` and `_comment*`)"
                        .into(),
                ));
            }
            (map, "mcpServers.")
        }
        Some(_) => {
            return Err(field_err(
                "mcpServers",
                "expected an object of servers".into(),
            ))
        }
        None => {
            if let Some((field, why)) = misspelt_server_map(&top) {
                return Err(field_err(&field, why));
            }
            (top, "")
        }
    };

    let mut servers = Vec::with_capacity(servers_obj.len());
    for (name, v) in servers_obj {
        let field = format!("{prefix}{name}");
        validate_server_name(&name).map_err(|m| field_err(&field, m))?;
        // Decoded on its own first, so that an error inside names its whole path
        // (`mcpServers.fs.sandbox.filesystem.allowWrite`): `sandbox` is read as `false`,
        // `true` or an object, which loses the path within.
        if let Some(sandbox @ Value::Object(_)) = v.get("sandbox") {
            let sandbox: super::types::SandboxConfig =
                decode(sandbox.clone(), &format!("{field}.sandbox"), file)?;
            let cwd = v.get("cwd").and_then(Value::as_str);
            check_sandbox_paths(
                &sandbox.filesystem,
                &format!("{field}.sandbox.filesystem"),
                cwd,
            )
            .map_err(|(at, why)| field_err(&at, why))?;
        }
        let server: ServerConfig = decode(v, &field, file)?;
        if server.command.trim().is_empty() {
            return Err(field_err(
                &format!("{field}.command"),
                "is empty: give the executable to run".into(),
            ));
        }
        if let Some(t) = &server.transport {
            if t != "stdio" {
                return Err(field_err(
                    &format!("{field}.type"),
                    format!("transport `{t}` is not supported; palisade launches stdio servers"),
                ));
            }
        }
        for (key, filter) in [("tools", &server.tools), ("prompts", &server.prompts)] {
            if let Some(f) = filter {
                f.validate()
                    .map_err(|m| field_err(&format!("{field}.{key}"), m))?;
            }
        }
        if let Some(relay) = &server.relay {
            validate_relay(relay)
                .map_err(|(key, m)| field_err(&format!("{field}.relay.{key}"), m))?;
        }
        servers.push((name, server));
    }
    let unprefixed: Vec<&str> = servers
        .iter()
        .filter(|(_, s)| s.prefix == Some(false))
        .map(|(n, _)| n.as_str())
        .collect();
    if unprefixed.len() > 1 {
        return Err(field_err(
            &format!("mcpServers.{}.prefix", unprefixed[1]),
            format!(
                "only one server may keep its own names; {} all say \"prefix\": false and \
                 their names could collide: keep it on one of them",
                unprefixed.join(", ")
            ),
        ));
    }
    Ok(GatewayConfig { servers, settings })
}
/// The flat shape (IronCurtain's) whose map is really `mcpServers` misspelt (`mcpServer`): a
/// top-level entry with no command whose values are all servers' objects. Its field and why.
fn misspelt_server_map(top: &Map<String, Value>) -> Option<(String, String)> {
    top.iter().find_map(|(name, v)| {
        let o = v.as_object()?;
        let holds_servers = !o.is_empty() && o.values().all(|s| s.get("command").is_some());
        (o.get("command").is_none() && holds_servers).then(|| {
            let why =
                format!("holds servers but is not `mcpServers`: rename `{name}` to `mcpServers`");
            (name.clone(), why)
        })
    })
}

/// Server names become tool-name prefixes (`server__tool`), so they must not contain the
/// separator or characters clients reject in tool names.
fn validate_server_name(name: &str) -> Result<(), String> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if name.is_empty() || !ok_chars || name.contains("__") || name.len() > 48 {
        return Err(format!(
            "server name `{name}` must be 1-48 characters of [A-Za-z0-9_-] without `__` \
             (it prefixes tool names as NAME__tool)"
        ));
    }
    Ok(())
}

/// Upper bounds for the relay's limits: a server needs a handful of relayed requests; a
/// larger number is a typo or a flood waiting to happen.
pub const RELAY_MAX_CONCURRENT: u32 = 16;
pub const RELAY_MAX_PER_MINUTE: u32 = 600;

/// The relay limits must be usable (a zero would turn relaying on and refuse everything).
pub fn validate_relay(relay: &super::types::RelayConfig) -> Result<(), (&'static str, String)> {
    if let Some(n) = relay.max_concurrent {
        if !(1..=RELAY_MAX_CONCURRENT).contains(&n) {
            return Err((
                "maxConcurrent",
                format!("is {n}: give 1 to {RELAY_MAX_CONCURRENT} (or turn relaying off with \"sampling\": false, \"elicitation\": false)"),
            ));
        }
    }
    if let Some(n) = relay.per_minute {
        if !(1..=RELAY_MAX_PER_MINUTE).contains(&n) {
            return Err((
                "perMinute",
                format!("is {n}: give 1 to {RELAY_MAX_PER_MINUTE} (or turn relaying off with \"sampling\": false, \"elicitation\": false)"),
            ));
        }
    }
    Ok(())
}

fn decode<T: serde::de::DeserializeOwned>(
    value: Value,
    field: &str,
    file: &str,
) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let inner = e.path().to_string();
        let full = if inner == "." || inner.is_empty() {
            field.to_string()
        } else {
            format!("{field}.{inner}")
        };
        ConfigError::Field {
            file: file.to_string(),
            field: full,
            message: e.into_inner().to_string(),
        }
    })
}

/// Removes `_comment`, `_comment2`, ... keys at every depth: they are documentation.
fn strip_comments(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let keep: Map<String, Value> = std::mem::take(map)
                .into_iter()
                .filter(|(k, _)| !k.starts_with("_comment"))
                .collect();
            *map = keep;
            map.values_mut().for_each(strip_comments);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_comments),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_inside_sandbox_names_its_whole_path_and_a_misspelt_mcpservers_is_named() {
        let err = |text: &str| parse_str(text, "c.json").unwrap_err().to_string();
        let e = err(
            r#"{"mcpServers":{"fs":{"command":"x","sandbox":{"filesystem":{"allowWrite":"/tmp"}}}}}"#,
        );
        assert!(
            e.contains("`mcpServers.fs.sandbox.filesystem.allowWrite`"),
            "{e}"
        );
        let e = err(r#"{"mcpServers":{"fs":{"command":"x","sandbox":{"filesytem":{}}}}}"#);
        assert!(e.contains("`mcpServers.fs.sandbox.filesytem`"), "{e}");
        let e = err(r#"{"mcpServer":{"fs":{"command":"x"}}}"#);
        assert!(e.contains("rename `mcpServer` to `mcpServers`"), "{e}");
        let e = err(
            r#"{"mcpServers":{"fs":{"command":"x","sandbox":{"filesystem":{"allowWrite":["/a", "./proj"]}}}}}"#,
        );
        assert!(
            e.contains("c.json") && e.contains("`mcpServers.fs.sandbox.filesystem.allowWrite[1]`"),
            "{e}"
        );
        assert!(e.contains("`./proj` is relative"), "{e}");
        assert!(parse_str(r#"{"mcpServers":{"fs":{"command":"x","sandbox":{"filesystem":{"allowRead":["~/docs", "~", "file:///srv/x"]}}}}}"#, "c.json").is_ok());
        // Relative to the server's own cwd: as the server's start resolves it.
        assert!(parse_str(r#"{"mcpServers":{"fs":{"command":"x","cwd":"/srv/p","sandbox":{"filesystem":{"allowWrite":["."]}}}}}"#, "c.json").is_ok());
        // The flat shape itself still loads.
        assert!(parse_str(r#"{"fs":{"command":"x","sandbox":false}}"#, "c.json").is_ok());
    }

    #[test]
    fn a_tilde_in_the_palisade_blocks_paths_is_the_home() {
        let mut v = serde_json::json!({
            "auditLog": "~/.local/state/palisade/audit.jsonl",
            "sandboxDir": "~",
            "protectedPaths": ["~/.ssh", "/etc/x", "~other/y"],
            "policy": "relative/~/p.json",
            "http": {"tokens": "~/tokens"},
            "escalation": "~/not-a-path",
        });
        expand_home(&mut v, Some(Path::new("/home/me"))).unwrap();
        assert_eq!(v["auditLog"], "/home/me/.local/state/palisade/audit.jsonl");
        assert_eq!(v["sandboxDir"], "/home/me");
        assert_eq!(
            v["protectedPaths"],
            serde_json::json!(["/home/me/.ssh", "/etc/x", "~other/y"])
        );
        assert_eq!(v["policy"], "relative/~/p.json");
        assert_eq!(v["http"]["tokens"], "/home/me/tokens");
        assert_eq!(v["escalation"], "~/not-a-path", "not a path field");
        let mut v = serde_json::json!({"auditLog": "~/a"});
        assert_eq!(expand_home(&mut v, None).unwrap_err(), "palisade.auditLog");
    }
    use crate::config::{NetworkConfig, SandboxSetting};

    #[test]
    fn claude_desktop_shape_with_sandbox_block() {
        let cfg = parse_str(
            r#"{"mcpServers": {"fs": {"command": "node", "args": ["a"],
                "sandbox": {"filesystem": {"allowWrite": ["/tmp/x"]},
                            "network": {"allowedDomains": ["example.com"]}}}},
                "palisade": {"sandboxPolicy": "warn"}}"#,
            "c.json",
        )
        .unwrap();
        assert_eq!(cfg.servers.len(), 1);
        let SandboxSetting::Enabled(sb) = &cfg.servers[0].1.sandbox else {
            panic!("sandbox should be enabled")
        };
        assert_eq!(sb.filesystem.allow_write, vec!["/tmp/x".to_string()]);
        assert!(matches!(sb.network, NetworkConfig::Allowlist(_)));
        assert_eq!(
            cfg.settings.sandbox_policy,
            Some(crate::config::SandboxPolicy::Warn)
        );
    }

    #[test]
    fn unknown_key_names_file_and_field() {
        let err = parse_str(
            r#"{"mcpServers": {"fs": {"command": "node", "sandbox": {"filesytem": {}}}}}"#,
            "c.json",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("c.json"), "{err}");
        assert!(err.contains("mcpServers.fs"), "{err}");
        assert!(err.contains("filesytem"), "{err}");
    }

    #[test]
    fn comments_are_ignored_everywhere() {
        let cfg = parse_str(
            r#"{"_comment": "x", "mcpServers": {"a": {"command": "c", "_comment2": "y",
                "sandbox": {"_comment": "z"}}}}"#,
            "c.json",
        )
        .unwrap();
        assert_eq!(cfg.servers[0].0, "a");
    }

    #[test]
    fn the_ironcurtain_corpus_file_loads_as_a_flat_map() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/ironcurtain/src/config/mcp-servers.json");
        let text = std::fs::read_to_string(&path).unwrap();
        let cfg = parse_str(&text, "mcp-servers.json").unwrap();
        let names: Vec<_> = cfg.servers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["filesystem", "git", "fetch", "github", "google-workspace"]
        );
        assert_eq!(cfg.servers[0].1.sandbox, SandboxSetting::Disabled);
    }

    #[test]
    fn relay_is_a_strict_per_server_block() {
        let cfg = parse_str(
            r#"{"mcpServers": {"a": {"command": "c", "sandbox": false,
                "relay": {"sampling": true, "perMinute": 5}}, "b": {"command": "d"}}}"#,
            "c.json",
        )
        .unwrap();
        let relay = cfg.servers[0].1.relay.clone().unwrap();
        assert_eq!(relay.sampling, Some(true));
        assert_eq!(relay.elicitation, None);
        assert_eq!(relay.per_minute, Some(5));
        assert_eq!(cfg.servers[1].1.relay, None);
        let e = parse_str(
            r#"{"mcpServers": {"a": {"command": "c", "relay": {"samplng": true}}}}"#,
            "c.json",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("c.json") && e.contains("mcpServers.a.relay") && e.contains("samplng"),
            "{e}"
        );
        let e = parse_str(
            r#"{"mcpServers": {"a": {"command": "c", "relay": {"sampling": true, "maxConcurrent": 0}}}}"#,
            "c.json",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("mcpServers.a.relay.maxConcurrent") && e.contains("1 to 16"),
            "{e}"
        );
        let e = parse_str(
            r#"{"mcpServers": {"a": {"command": "c", "relay": {"sampling": "yes"}}}}"#,
            "c.json",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("mcpServers.a.relay.sampling"), "{e}");
    }

    #[test]
    fn bad_server_name_and_unrestricted_network_are_rejected() {
        let e = parse_str(r#"{"mcpServers": {"a__b": {"command": "c"}}}"#, "f").unwrap_err();
        assert!(e.to_string().contains("a__b"));
        let e = parse_str(
            r#"{"mcpServers": {"a": {"command": "c", "sandbox": {"network": true}}}}"#,
            "f",
        )
        .unwrap_err();
        assert!(e.to_string().contains("network"), "{e}");
    }

    #[test]
    fn two_servers_keeping_their_own_names_are_refused_by_name() {
        let text = r#"{"mcpServers": {
            "a": {"command": "x", "prefix": false},
            "b": {"command": "y", "prefix": false},
            "c": {"command": "z"}}}"#;
        let e = parse_str(text, "servers.json").unwrap_err().to_string();
        assert!(e.contains("mcpServers.b.prefix"), "{e}");
        assert!(e.contains("a, b"), "{e}");
        let one =
            r#"{"mcpServers": {"a": {"command": "x", "prefix": false}, "c": {"command": "z"}}}"#;
        assert!(parse_str(one, "servers.json").is_ok());
    }
}
