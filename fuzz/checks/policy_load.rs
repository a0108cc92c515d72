//! Policy, annotation and list loading (src/policy/load.rs, `Policy::load`) and role
//! guessing from tool schemas (src/policy/annotate.rs).
//!
//! Input: one selector byte, then file contents. Selector 0/1/2 loads the rest as the
//! compiled policy / tool annotations / dynamic lists; 3 splits the rest at 0xFF bytes (never
//! part of UTF-8 JSON) into policy, annotations and lists, loaded together.
//!
//! Invariants:
//! 1. Loading never panics, and a refusal names the file it came from.
//! 2. A loaded policy fails closed: a tool it does not know is denied, and a protected path
//!    (palisade's own files) in any path-role argument of any tool it does know is never
//!    allowed, whatever the rules say.
//! 3. Guessing roles from any JSON as an input schema never panics, gives roles to exactly
//!    the schema's properties, and gives every property named `path` a path role.

use std::path::PathBuf;

use palisade::policy::annotate::derive_annotation;
use palisade::policy::load::ArgRoles;
use palisade::policy::{CallContext, Policy, PolicyOptions, PolicyPaths, Role, Status, ToolInfo};
use serde_json::{Map, Value};

pub fn run(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let dir = super::scratch();
    let file = |name: &str, bytes: &[u8]| -> PathBuf {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).expect("scratch file");
        p
    };
    let mut paths = PolicyPaths::default();
    let mut files = Vec::new();
    match selector % 4 {
        0 => paths.policy = Some(file("compiled-policy.json", rest)),
        1 => paths.annotations = Some(file("tool-annotations.json", rest)),
        2 => paths.lists = Some(file("dynamic-lists.json", rest)),
        _ => {
            let mut parts = rest.splitn(3, |b| *b == 0xff);
            let p = parts.next().unwrap_or_default();
            paths.policy = Some(file("compiled-policy.json", p));
            if let Some(a) = parts.next() {
                paths.annotations = Some(file("tool-annotations.json", a));
            }
            if let Some(l) = parts.next() {
                paths.lists = Some(file("dynamic-lists.json", l));
            }
        }
    }
    files.extend(paths.policy.iter().cloned());
    files.extend(paths.annotations.iter().cloned());
    files.extend(paths.lists.iter().cloned());

    let home = dir.path().join("home");
    let options = PolicyOptions {
        home: Some(home.clone()),
        ..Default::default()
    };
    match Policy::load(&paths, options) {
        Err(e) => {
            let msg = e.to_string();
            assert!(
                files.iter().any(|f| msg.contains(&f.display().to_string())),
                "a load error does not name its file: {msg}"
            );
        }
        Ok(policy) => fails_closed(&policy, rest, &dir.path().join("palisade.json"), &home),
    }

    if let Ok(schema) = serde_json::from_slice::<Value>(rest) {
        guessed_roles(&schema, selector);
    }
}

fn fails_closed(policy: &Policy, raw: &[u8], protected: &std::path::Path, home: &std::path::Path) {
    let scope =
        palisade::policy::Scope::new(None, &[protected.to_path_buf()], Some(home)).expect("scope");
    let empty = Map::new();
    let call = |server: &str, tool: &str, args: &Map<String, Value>| {
        policy.evaluate(&CallContext {
            server,
            tool,
            arguments: args,
            cwd: None,
            home: Some(home),
            scope: &scope,
            roots: &[],
        })
    };
    let d = call("no-such-server", "no-such-tool", &empty);
    assert_eq!(d.status, Status::Deny, "unknown tool not denied: {d:?}");

    // Tool names: every short string of the input (cheap, and finds what the file named).
    let mut names = Vec::new();
    if let Ok(v) = serde_json::from_slice::<Value>(raw.split(|b| *b == 0xff).nth(1).unwrap_or(raw))
    {
        strings(&v, &mut names);
    }
    names.sort();
    names.dedup();
    names.truncate(200);
    let servers: Vec<String> = policy.annotated_servers().map(str::to_string).collect();
    for server in &servers {
        for tool in &names {
            let Some(ann) = policy.annotation(server, tool) else {
                continue;
            };
            for (arg, roles) in &ann.args {
                let ArgRoles::Static(roles) = roles else {
                    continue;
                };
                if !roles
                    .iter()
                    .any(|r| matches!(r, Role::ReadPath | Role::WritePath | Role::DeletePath))
                {
                    continue;
                }
                let mut args = Map::new();
                args.insert(arg.clone(), Value::from(protected.display().to_string()));
                let d = call(server, tool, &args);
                assert_ne!(
                    d.status,
                    Status::Allow,
                    "{server}/{tool}: protected path in `{arg}` allowed: {d:?}"
                );
            }
        }
    }
}

fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) if s.len() <= 64 => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => {
            for (k, x) in o {
                if k.len() <= 64 {
                    out.push(k.clone());
                }
                strings(x, out);
            }
        }
        _ => {}
    }
}

fn guessed_roles(schema: &Value, selector: u8) {
    let hint = |bit: u8| match (selector >> bit) & 3 {
        0 => None,
        1 => Some(false),
        _ => Some(true),
    };
    let ann = derive_annotation(&ToolInfo {
        name: "fuzzed_tool",
        input_schema: schema,
        read_only_hint: hint(2),
        destructive_hint: hint(4),
    });
    let props = schema.get("properties").and_then(Value::as_object);
    let want: Vec<&String> = props.map(|p| p.keys().collect()).unwrap_or_default();
    let got: Vec<&String> = ann.args.iter().map(|(n, _)| n).collect();
    assert_eq!(
        got, want,
        "roles for other names than the schema's properties"
    );
    for (name, roles) in &ann.args {
        if name == "path" {
            let ArgRoles::Static(r) = roles else {
                panic!("derived roles are static")
            };
            assert!(
                r.contains(&Role::ReadPath),
                "`path` without a path role: {r:?}"
            );
        }
    }
}
