//! The fs-server's tool catalogue: names, input schemas and annotations, and the typed
//! arguments each tool accepts.
//!
//! Pure. Property names are part of the contract: every path argument is called `path`, so
//! the gateway's default policy and IronCurtain-style annotations recognise its role.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde::Deserialize;
use serde_json::{json, Value};

pub const READ: &str = "read";
pub const LIST: &str = "list";
pub const WRITE: &str = "write";
pub const STAT: &str = "stat";
pub const SEARCH: &str = "search";
pub const LIST_ROOTS: &str = "list_roots";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PathArgs {
    pub path: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReadArgs {
    pub path: String,
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WriteArgs {
    pub path: String,
    pub content: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SearchArgs {
    pub path: String,
    pub pattern: String,
    #[serde(default)]
    pub max_results: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

fn path_prop(what: &str) -> Value {
    json!({
        "type": "string",
        "description": format!("Absolute path (or file:// URI) of the {what}; must lie inside a root.")
    })
}

fn schema(properties: Value, required: &[&str]) -> Arc<JsonObject> {
    let v = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    match v {
        Value::Object(map) => Arc::new(map),
        // `json!` with an object literal always yields an object.
        _ => Arc::new(JsonObject::new()),
    }
}

fn read_only(title: &str) -> ToolAnnotations {
    ToolAnnotations::with_title(title)
        .read_only(true)
        .destructive(false)
        .idempotent(true)
        .open_world(false)
}

/// Every tool, in listing order.
pub fn catalogue(max_read_bytes: u64, max_search_results: usize) -> Vec<Tool> {
    vec![
        Tool::new(
            READ,
            format!(
                "Read a UTF-8 text file inside the roots (at most {max_read_bytes} bytes; larger files fail with TOO_LARGE)."
            ),
            schema(
                json!({
                    "path": path_prop("file"),
                    "maxBytes": {"type": "integer", "minimum": 1, "description": "Refuse the read (TOO_LARGE) above this many bytes; capped by the server's limit."}
                }),
                &["path"],
            ),
        )
        .with_title("Read file")
        .with_annotations(read_only("Read file")),
        Tool::new(
            LIST,
            "List a directory inside the roots: each entry's name, type (file, dir, symlink, other) and size.",
            schema(json!({ "path": path_prop("directory") }), &["path"]),
        )
        .with_title("List directory")
        .with_annotations(read_only("List directory")),
        Tool::new(
            WRITE,
            "Create or overwrite a text file inside a read-write root. The parent directory must exist; a symlink is never followed.",
            schema(
                json!({
                    "path": path_prop("file to create or overwrite"),
                    "content": {"type": "string", "description": "The complete new content (UTF-8)."}
                }),
                &["path", "content"],
            ),
        )
        .with_title("Write file")
        .with_annotations(
            ToolAnnotations::with_title("Write file")
                .read_only(false)
                .destructive(true)
                .idempotent(true)
                .open_world(false),
        ),
        Tool::new(
            STAT,
            "Type, size, permissions and modification time of a path inside the roots.",
            schema(json!({ "path": path_prop("file or directory") }), &["path"]),
        )
        .with_title("Stat path")
        .with_annotations(read_only("Stat path")),
        Tool::new(
            SEARCH,
            format!(
                "Find files and directories below a directory whose name matches a glob (*, ?, [..]) or contains a substring (case-insensitive). Symlinks are not followed; at most {max_search_results} results."
            ),
            schema(
                json!({
                    "path": path_prop("directory to search"),
                    "pattern": {"type": "string", "minLength": 1, "description": "Glob on the file name, or a substring when it has no *, ? or [."},
                    "maxResults": {"type": "integer", "minimum": 1, "description": "Stop after this many matches."}
                }),
                &["path", "pattern"],
            ),
        )
        .with_title("Search by name")
        .with_annotations(read_only("Search by name")),
        Tool::new(
            LIST_ROOTS,
            "The directories this server may access now, with their access (ro/rw), where they came from (client roots or --root) and a version that changes whenever they are replaced.",
            schema(json!({}), &[]),
        )
        .with_title("List roots")
        .with_annotations(read_only("List roots")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_argument_is_named_path_and_hints_are_set() {
        for tool in catalogue(10, 10) {
            let props = tool.input_schema["properties"].as_object().unwrap();
            if tool.name != LIST_ROOTS {
                assert!(props.contains_key("path"), "{}", tool.name);
            }
            let ann = tool.annotations.as_ref().unwrap();
            if tool.name == WRITE {
                assert_eq!(ann.read_only_hint, Some(false));
                assert_eq!(ann.destructive_hint, Some(true));
            } else {
                assert_eq!(ann.read_only_hint, Some(true), "{}", tool.name);
            }
        }
    }
}
