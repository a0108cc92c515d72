//! Guessing argument roles for a tool nobody annotated, from what its server says about it:
//! the input schema's property names and formats and the MCP hints (`readOnlyHint`,
//! `destructiveHint`). Used by the built-in default policy when no `tool-annotations.json`
//! was given, and by `palisade annotate` to write a draft for review.
//!
//! Pure. Guesses err towards more roles (a write role where unsure), never fewer: a wrong
//! extra role costs an escalation, a missing one would let a path through unchecked.

use serde_json::Value;

use super::load::{Annotation, ArgRoles};
use super::model::Role;

/// What the gateway learns about one tool from `tools/list`.
#[derive(Debug, Clone, Copy)]
pub struct ToolInfo<'a> {
    pub name: &'a str,
    pub input_schema: &'a Value,
    pub read_only_hint: Option<bool>,
    pub destructive_hint: Option<bool>,
}

/// Property names that hold filesystem paths in the servers we know (filesystem, git, memory,
/// and common conventions).
const PATH_NAMES: &[&str] = &[
    "path",
    "paths",
    "file",
    "files",
    "filename",
    "file_path",
    "filepath",
    "dir",
    "directory",
    "dirpath",
    "folder",
    "source",
    "destination",
    "target",
    "repo_path",
    "cwd",
    "root",
];

const URL_NAMES: &[&str] = &["url", "uri", "href", "urls", "endpoint"];

fn looks_like_path(name: &str, prop: &Value) -> bool {
    let n = name.to_ascii_lowercase();
    PATH_NAMES.contains(&n.as_str())
        || n.ends_with("_path")
        || n.ends_with("_dir")
        || n.ends_with("path") && n.len() > 4
        || prop.get("format").and_then(Value::as_str) == Some("path")
}

fn looks_like_url(name: &str, prop: &Value) -> bool {
    let n = name.to_ascii_lowercase();
    URL_NAMES.contains(&n.as_str())
        || n.ends_with("_url")
        || matches!(
            prop.get("format").and_then(Value::as_str),
            Some("uri") | Some("url")
        )
}

/// Tool names whose verb says they only read, for servers that give no hints.
fn read_only_by_name(tool: &str) -> bool {
    let t = tool.to_ascii_lowercase();
    [
        "read",
        "get",
        "list",
        "search",
        "find",
        "show",
        "view",
        "stat",
        "status",
        "diff",
        "log",
        "directory_tree",
    ]
    .iter()
    .any(|v| t == *v || t.starts_with(&format!("{v}_")) || t.starts_with(&format!("{v}-")))
}

/// Roles for every schema property of a tool.
pub fn derive_annotation(tool: &ToolInfo<'_>) -> Annotation {
    let read_only = tool
        .read_only_hint
        .unwrap_or_else(|| read_only_by_name(tool.name));
    let destructive = tool.destructive_hint.unwrap_or(!read_only);
    let path_roles: Vec<Role> = if read_only {
        vec![Role::ReadPath]
    } else if destructive {
        vec![Role::ReadPath, Role::WritePath, Role::DeletePath]
    } else {
        vec![Role::ReadPath, Role::WritePath]
    };
    let mut args = Vec::new();
    if let Some(props) = tool
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
    {
        for (name, prop) in props {
            let roles = if looks_like_path(name, prop) {
                path_roles.clone()
            } else if looks_like_url(name, prop) {
                vec![Role::FetchUrl]
            } else {
                vec![Role::None]
            };
            args.push((name.clone(), ArgRoles::Static(roles)));
        }
    }
    Annotation {
        args,
        input_schema: Some(tool.input_schema.clone()),
        read_only: Some(read_only),
        derived: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn roles(a: &Annotation, arg: &str) -> Vec<Role> {
        a.args
            .iter()
            .find(|(n, _)| n == arg)
            .map(|(_, r)| match r {
                ArgRoles::Static(r) => r.clone(),
                ArgRoles::Conditional(c) => c.default.clone(),
            })
            .unwrap()
    }

    #[test]
    fn hints_and_names_decide_path_roles() {
        let schema = json!({"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}}});
        let w = derive_annotation(&ToolInfo {
            name: "write_file",
            input_schema: &schema,
            read_only_hint: Some(false),
            destructive_hint: Some(true),
        });
        assert_eq!(
            roles(&w, "path"),
            vec![Role::ReadPath, Role::WritePath, Role::DeletePath]
        );
        assert_eq!(roles(&w, "content"), vec![Role::None]);
        let r = derive_annotation(&ToolInfo {
            name: "read_text_file",
            input_schema: &schema,
            read_only_hint: None,
            destructive_hint: None,
        });
        assert_eq!(roles(&r, "path"), vec![Role::ReadPath]);
        let u = json!({"type":"object","properties":{"url":{"type":"string"}}});
        let f = derive_annotation(&ToolInfo {
            name: "fetch",
            input_schema: &u,
            read_only_hint: Some(true),
            destructive_hint: None,
        });
        assert_eq!(roles(&f, "url"), vec![Role::FetchUrl]);
    }
}
