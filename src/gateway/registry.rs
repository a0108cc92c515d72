//! The aggregated catalog: what the agent sees and how each name routes back to a server.
//!
//! Pure: built from each running server's lists, in config order, and replaced whole (an
//! `Arc` swap) whenever a server starts, stops or reports `list_changed`. Lookups on the call
//! path are hash-map reads on a shared snapshot; nothing here does I/O or holds a lock.
//!
//! Namespacing (see docs/architecture.md, "Names"):
//! - tools and prompts: `SERVER__NAME` (server names cannot contain `__`, see config);
//! - resources keep their URI, routed by a table built from every server's `resources/list`;
//!   a URI listed by two servers is refused by name (both servers named), never guessed;
//! - a URI no server lists is routed by resource templates: the server whose template's
//!   literal prefix (text before the first `{`) is the longest match wins; a tie between two
//!   servers is refused as ambiguous.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use rmcp::model::{Prompt, Resource, ResourceTemplate, Tool};

/// The separator between server and tool/prompt name.
pub const SEP: &str = "__";

/// One server's lists as it last reported them: typed views for routing and policy, and
/// each entry's JSON as the server sent it (`raw`), which is what the agent is shown.
#[derive(Debug, Clone, Default)]
pub struct ServerLists {
    pub tools: Vec<Tool>,
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
    pub raw: RawItems,
}

/// One of a server's lists: what a server says changed, and what is fetched again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListKind {
    Tools,
    Prompts,
    Resources,
}

impl ServerLists {
    /// Takes `kind`'s lists (typed and raw) from `fresh`, a listing of that kind.
    pub fn take_kind(&mut self, kind: ListKind, fresh: ServerLists) {
        match kind {
            ListKind::Tools => {
                self.tools = fresh.tools;
                self.raw.tools = fresh.raw.tools;
            }
            ListKind::Prompts => {
                self.prompts = fresh.prompts;
                self.raw.prompts = fresh.raw.prompts;
            }
            ListKind::Resources => {
                self.resources = fresh.resources;
                self.templates = fresh.templates;
                self.raw.resources = fresh.raw.resources;
                self.raw.templates = fresh.raw.templates;
            }
        }
    }
}

/// A JSON object as a server sent it (key order kept; numbers as written, within what
/// `serde_json` keeps: `1` stays `1` and `1.0` stays `1.0`).
pub type JsonObject = serde_json::Map<String, Value>;

/// The server's own JSON of each listed entry, by its key (tool and prompt name, resource
/// URI, template URI template). The typed models drop fields they do not know (a tool's
/// `execution`, a future field); these do not.
#[derive(Debug, Clone, Default)]
pub struct RawItems {
    pub tools: Arc<HashMap<String, JsonObject>>,
    pub prompts: Arc<HashMap<String, JsonObject>>,
    pub resources: Arc<HashMap<String, JsonObject>>,
    pub templates: Arc<HashMap<String, JsonObject>>,
}

/// `item` as the server sent it (found under `key` in `raw`), else as the typed model
/// writes it; with `name` set to `rename` when given.
fn shown<T: serde::Serialize>(
    raw: &HashMap<String, JsonObject>,
    key: &str,
    item: &T,
    rename: Option<&str>,
) -> Value {
    let mut obj = match raw.get(key) {
        Some(o) => o.clone(),
        None => match serde_json::to_value(item) {
            Ok(Value::Object(o)) => o,
            _ => JsonObject::new(),
        },
    };
    if let Some(name) = rename {
        // An existing key keeps its place (`preserve_order`): only the value changes.
        obj.insert("name".into(), Value::String(name.to_string()));
    }
    Value::Object(obj)
}

/// A server's name filters from its config (`tools`, `prompts`): what is filtered out never
/// reaches the catalog, so the agent neither sees nor can route to it.
#[derive(Debug, Clone, Default)]
pub struct ListFilters {
    pub tools: Option<crate::config::NameFilter>,
    pub prompts: Option<crate::config::NameFilter>,
    /// `"prefix": false`: the server's names are shown as its own, not `SERVER__NAME`.
    pub unprefixed: bool,
}

impl ListFilters {
    pub fn of(server: &crate::config::ServerConfig) -> ListFilters {
        ListFilters {
            tools: server.tools.clone(),
            prompts: server.prompts.clone(),
            unprefixed: server.prefix == Some(false),
        }
    }

    /// `lists` less what the filters hide.
    pub fn apply(&self, lists: &ServerLists) -> ServerLists {
        let admits = |f: &Option<crate::config::NameFilter>, name: &str| {
            f.as_ref().is_none_or(|f| f.check(name).is_ok())
        };
        ServerLists {
            tools: lists
                .tools
                .iter()
                .filter(|t| admits(&self.tools, &t.name))
                .cloned()
                .collect(),
            prompts: lists
                .prompts
                .iter()
                .filter(|p| admits(&self.prompts, &p.name))
                .cloned()
                .collect(),
            resources: lists.resources.clone(),
            templates: lists.templates.clone(),
            raw: lists.raw.clone(),
        }
    }

    /// Why the tool `name` is hidden, when it is.
    pub fn hides_tool(&self, name: &str) -> Option<crate::config::filter::Hidden> {
        self.tools.as_ref().and_then(|f| f.check(name).err())
    }
}

/// Where a namespaced name goes: the server's index in config order and its own name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub server: usize,
    pub name: String,
}

/// Why a URI or name cannot be routed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("unknown {kind} `{name}`: no running server offers it (names are SERVER__NAME)")]
    Unknown { kind: &'static str, name: String },
    #[error(
        "resource `{uri}` is offered by several servers ({}); palisade refuses to guess which \
         one is meant",
        servers.join(", ")
    )]
    Ambiguous { uri: String, servers: Vec<String> },
}

/// The merged view over all running servers.
#[derive(Debug, Default)]
pub struct Catalog {
    pub tools: Vec<Tool>,
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
    /// The list results the agent is given, built once per catalog from the servers' own
    /// JSON (`RawItems`), names rewritten: `{"tools": [...]}` and so on.
    pub tools_result: Arc<Value>,
    pub prompts_result: Arc<Value>,
    pub resources_result: Arc<Value>,
    pub templates_result: Arc<Value>,
    tool_routes: HashMap<String, Route>,
    prompt_routes: HashMap<String, Route>,
    uri_routes: HashMap<String, Vec<usize>>,
    /// (literal prefix, server) per template.
    template_prefixes: Vec<(String, usize)>,
    /// Server names by index, for error messages.
    names: Vec<String>,
}

/// Splits `server__name` at the first separator.
pub fn split_name(full: &str) -> Option<(&str, &str)> {
    full.split_once(SEP)
}

pub fn join_name(server: &str, name: &str) -> String {
    format!("{server}{SEP}{name}")
}

impl Catalog {
    /// Builds the catalog. `servers[i]` is `(name, Some(lists))` when server `i` is running.
    pub fn build(servers: &[(String, Option<&ServerLists>)]) -> Catalog {
        Catalog::build_with(servers, &[])
    }

    /// As `build`; `unprefixed[i]` true shows server `i`'s names as its own. A name that
    /// would then be offered twice goes to the server first in config order; the other is
    /// left out and the collision logged with both servers named.
    pub fn build_with(servers: &[(String, Option<&ServerLists>)], unprefixed: &[bool]) -> Catalog {
        let mut c = Catalog {
            names: servers.iter().map(|(n, _)| n.clone()).collect(),
            ..Catalog::default()
        };
        let (mut tools, mut prompts, mut resources, mut templates) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (idx, (server, lists)) in servers.iter().enumerate() {
            let Some(lists) = lists else { continue };
            let raw = &lists.raw;
            let own = unprefixed.get(idx).copied().unwrap_or(false);
            let shown_as = |name: &str| {
                if own {
                    name.to_string()
                } else {
                    join_name(server, name)
                }
            };
            for tool in &lists.tools {
                let full = shown_as(&tool.name);
                if let Some(first) = c.tool_routes.get(&full) {
                    tracing::error!(
                        "tool `{full}` of server `{server}` is not offered: server `{}` offers \
                         a tool of that name (\"prefix\": false)",
                        c.names[first.server]
                    );
                    continue;
                }
                tools.push(shown(&raw.tools, &tool.name, tool, Some(&full)));
                let mut t = tool.clone();
                t.name = full.clone().into();
                c.tools.push(t);
                c.tool_routes.insert(
                    full,
                    Route {
                        server: idx,
                        name: tool.name.to_string(),
                    },
                );
            }
            for prompt in &lists.prompts {
                let full = shown_as(&prompt.name);
                if let Some(first) = c.prompt_routes.get(&full) {
                    tracing::error!(
                        "prompt `{full}` of server `{server}` is not offered: server `{}` \
                         offers a prompt of that name (\"prefix\": false)",
                        c.names[first.server]
                    );
                    continue;
                }
                prompts.push(shown(&raw.prompts, &prompt.name, prompt, Some(&full)));
                let mut p = prompt.clone();
                p.name = full.clone();
                c.prompts.push(p);
                c.prompt_routes.insert(
                    full,
                    Route {
                        server: idx,
                        name: prompt.name.clone(),
                    },
                );
            }
            for res in &lists.resources {
                let owners = c.uri_routes.entry(res.uri.clone()).or_default();
                if !owners.contains(&idx) {
                    owners.push(idx);
                }
                resources.push(shown(&raw.resources, &res.uri, res, None));
                c.resources.push(res.clone());
            }
            for tpl in &lists.templates {
                let prefix = tpl
                    .uri_template
                    .split('{')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                c.template_prefixes.push((prefix, idx));
                templates.push(shown(&raw.templates, &tpl.uri_template, tpl, None));
                c.templates.push(tpl.clone());
            }
        }
        c.tools_result = Arc::new(serde_json::json!({ "tools": tools }));
        c.prompts_result = Arc::new(serde_json::json!({ "prompts": prompts }));
        c.resources_result = Arc::new(serde_json::json!({ "resources": resources }));
        c.templates_result = Arc::new(serde_json::json!({ "resourceTemplates": templates }));
        c
    }

    /// The answer to the list request `method` (`tools/list`, `prompts/list`,
    /// `resources/list`, `resources/templates/list`): the servers' own JSON, names rewritten,
    /// an empty list before any server has reported; `None` for any other method. Every
    /// front answers lists from here (stdio through rmcp's session, HTTP on its fast path),
    /// never through rmcp's typed models, which drop what they do not know (a tool's
    /// `execution`).
    pub fn listed(&self, method: &str) -> Option<Arc<Value>> {
        let (result, key) = match method {
            "tools/list" => (&self.tools_result, "tools"),
            "prompts/list" => (&self.prompts_result, "prompts"),
            "resources/list" => (&self.resources_result, "resources"),
            "resources/templates/list" => (&self.templates_result, "resourceTemplates"),
            _ => return None,
        };
        // Shared, not copied: a list is written out from the catalog's own value.
        Some(if result.is_null() {
            Arc::new(serde_json::json!({ key: [] }))
        } else {
            Arc::clone(result)
        })
    }

    pub fn tool(&self, full: &str) -> Result<&Route, RouteError> {
        self.tool_routes
            .get(full)
            .ok_or_else(|| RouteError::Unknown {
                kind: "tool",
                name: full.to_string(),
            })
    }

    pub fn prompt(&self, full: &str) -> Result<&Route, RouteError> {
        self.prompt_routes
            .get(full)
            .ok_or_else(|| RouteError::Unknown {
                kind: "prompt",
                name: full.to_string(),
            })
    }

    /// The server that serves `uri` (exact listing first, then templates).
    pub fn resource(&self, uri: &str) -> Result<usize, RouteError> {
        if let Some(owners) = self.uri_routes.get(uri) {
            return self.single(uri, owners);
        }
        let best = self
            .template_prefixes
            .iter()
            .filter(|(p, _)| !p.is_empty() && uri.starts_with(p.as_str()))
            .map(|(p, _)| p.len())
            .max();
        let Some(best) = best else {
            return Err(RouteError::Unknown {
                kind: "resource",
                name: uri.to_string(),
            });
        };
        let mut owners: Vec<usize> = self
            .template_prefixes
            .iter()
            .filter(|(p, _)| p.len() == best && uri.starts_with(p.as_str()))
            .map(|(_, s)| *s)
            .collect();
        owners.dedup();
        self.single(uri, &owners)
    }

    fn single(&self, uri: &str, owners: &[usize]) -> Result<usize, RouteError> {
        match owners {
            [one] => Ok(*one),
            _ => Err(RouteError::Ambiguous {
                uri: uri.to_string(),
                servers: owners
                    .iter()
                    .map(|i| self.names.get(*i).cloned().unwrap_or_default())
                    .collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> Tool {
        serde_json::from_value(json!({"name": name, "inputSchema": {"type": "object"}})).unwrap()
    }
    fn prompt(name: &str) -> Prompt {
        serde_json::from_value(json!({"name": name})).unwrap()
    }
    fn res(uri: &str) -> Resource {
        serde_json::from_value(json!({"uri": uri, "name": uri})).unwrap()
    }
    fn tpl(t: &str) -> ResourceTemplate {
        serde_json::from_value(json!({"uriTemplate": t, "name": t})).unwrap()
    }

    fn two_servers() -> Catalog {
        let a = ServerLists {
            tools: vec![tool("read"), tool("write")],
            prompts: vec![prompt("summarise")],
            resources: vec![res("file:///a.txt"), res("mem://shared")],
            templates: vec![tpl("demo://a/{id}")],
            raw: RawItems::default(),
        };
        let b = ServerLists {
            tools: vec![tool("read")],
            prompts: vec![prompt("summarise")],
            resources: vec![res("file:///b.txt"), res("mem://shared")],
            templates: vec![tpl("demo://{x}"), tpl("demo://b/{id}")],
            raw: RawItems::default(),
        };
        Catalog::build(&[
            ("a".into(), Some(&a)),
            ("down".into(), None),
            ("b".into(), Some(&b)),
        ])
    }

    #[test]
    fn same_tool_and_prompt_names_on_two_servers_do_not_collide() {
        let c = two_servers();
        let names: Vec<_> = c.tools.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, ["a__read", "a__write", "b__read"]);
        assert_eq!(
            c.tool("b__read").unwrap(),
            &Route {
                server: 2,
                name: "read".into()
            }
        );
        assert_eq!(c.prompt("a__summarise").unwrap().server, 0);
        assert_eq!(c.prompt("b__summarise").unwrap().server, 2);
        assert!(matches!(c.tool("read"), Err(RouteError::Unknown { .. })));
        assert!(matches!(c.tool("down__x"), Err(RouteError::Unknown { .. })));
    }

    #[test]
    fn resources_route_by_listing_then_by_longest_template_prefix() {
        let c = two_servers();
        assert_eq!(c.resource("file:///a.txt"), Ok(0));
        assert_eq!(c.resource("file:///b.txt"), Ok(2));
        assert_eq!(c.resource("demo://a/7"), Ok(0));
        assert_eq!(c.resource("demo://b/7"), Ok(2));
        assert_eq!(c.resource("demo://zzz"), Ok(2));
        assert!(matches!(
            c.resource("nothing://x"),
            Err(RouteError::Unknown { .. })
        ));
    }

    #[test]
    fn a_uri_two_servers_list_is_refused_with_both_names() {
        let c = two_servers();
        let err = c.resource("mem://shared").unwrap_err();
        assert_eq!(
            err,
            RouteError::Ambiguous {
                uri: "mem://shared".into(),
                servers: vec!["a".into(), "b".into()]
            }
        );
        assert!(err.to_string().contains("a, b"));
    }

    #[test]
    fn tool_fields_other_than_the_name_are_kept() {
        let t: Tool = serde_json::from_value(json!({
            "name": "x", "title": "X", "description": "d",
            "inputSchema": {"type": "object", "properties": {"z": {}, "a": {}}},
            "outputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true},
            "_meta": {"k": 1}
        }))
        .unwrap();
        let lists = ServerLists {
            tools: vec![t.clone()],
            ..Default::default()
        };
        let c = Catalog::build(&[("s".into(), Some(&lists))]);
        let mut out = serde_json::to_value(&c.tools[0]).unwrap();
        out["name"] = json!("x");
        assert_eq!(out, serde_json::to_value(&t).unwrap());
        // key order of the schema survives (preserve_order)
        let keys: Vec<_> = out["inputSchema"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, ["z", "a"]);
    }

    #[test]
    fn a_server_keeping_its_own_names_is_routed_by_them_and_never_shadows_another() {
        let own = ServerLists {
            tools: vec![tool("read"), tool("b__read")],
            ..Default::default()
        };
        let b = ServerLists {
            tools: vec![tool("read")],
            ..Default::default()
        };
        let c = Catalog::build_with(
            &[("b".into(), Some(&b)), ("own".into(), Some(&own))],
            &[false, true],
        );
        assert_eq!(
            c.tool("read").unwrap(),
            &Route {
                server: 1,
                name: "read".into()
            }
        );
        // `b__read` is b's (first in config order); the unprefixed server's copy is left out.
        assert_eq!(c.tool("b__read").unwrap().server, 0);
        assert_eq!(c.tools.len(), 2);
        assert_eq!(c.tools_result["tools"].as_array().unwrap().len(), 2);
    }
}
