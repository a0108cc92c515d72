//! Loading: reads the three IronCurtain files, validates them and builds the engine's form
//! (lists expanded, `within` directories canonicalised, rules indexed by server and tool).
//!
//! The only I/O in `policy`: reading the files and canonicalising `paths.within` once.
//! Every error names the file, the rule or tool, and the field. Never evaluates a call.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::model::{
    CompiledPolicyFile, CompiledRule, ConditionalRoles, DynamicListsFile, ListType, ResolvedList,
    Role, RoleSpec, ServerAnnotations, Status, ToolAnnotationsFile,
};
use crate::roots::canon::{self, Base};

/// Why a policy could not be loaded. Each variant names where the problem is.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{file}: cannot read: {cause}")]
    Io {
        file: PathBuf,
        cause: std::io::Error,
    },
    #[error("{file}: invalid at `{field}`: {message}")]
    Parse {
        file: PathBuf,
        field: String,
        message: String,
    },
    #[error("{file}: rule {rule:?}: field `{field}`: {message}")]
    Rule {
        file: PathBuf,
        rule: String,
        field: String,
        message: String,
    },
    #[error("{file}: server {server:?} tool {tool:?}: field `{field}`: {message}")]
    Tool {
        file: PathBuf,
        server: String,
        tool: String,
        field: String,
        message: String,
    },
    #[error("{file}: list {list:?}: {message}")]
    List {
        file: PathBuf,
        list: String,
        message: String,
    },
}

/// Which files to load. `None` everywhere means the built-in default policy.
#[derive(Debug, Clone, Default)]
pub struct PolicyPaths {
    pub policy: Option<PathBuf>,
    pub annotations: Option<PathBuf>,
    pub lists: Option<PathBuf>,
}

/// Settings that are not in the files.
#[derive(Debug, Clone, Default)]
pub struct PolicyOptions {
    /// The user's home, for `~` in rules' `paths.within` (defaults to `$HOME`).
    pub home: Option<PathBuf>,
    /// Per-server `sandbox.network.allowedDomains`: a URL-role argument outside its server's
    /// list escalates before any rule runs (IronCurtain's structural domain gate); under the
    /// built-in default policy, URLs inside it are allowed.
    pub server_domains: HashMap<String, Vec<String>>,
}

impl PolicyOptions {
    /// Each sandboxed server's `sandbox.network.allowedDomains` from the user's config (the
    /// `server_domains` option), skipping servers with none.
    pub fn server_domains_from(cfg: &crate::config::GatewayConfig) -> HashMap<String, Vec<String>> {
        use crate::config::{NetworkConfig, SandboxSetting};
        cfg.servers
            .iter()
            .filter_map(|(name, s)| match &s.sandbox {
                SandboxSetting::Enabled(sb) => match &sb.network {
                    NetworkConfig::Allowlist(d) if !d.allowed_domains.is_empty() => Some((
                        name.clone(),
                        // The egress syntax allows `host:port`; the policy's gate compares
                        // hosts, so the port is the proxy's business only.
                        d.allowed_domains.iter().map(|e| strip_port(e)).collect(),
                    )),
                    _ => None,
                },
                SandboxSetting::Disabled => None,
            })
            .collect()
    }
}

/// `example.com:8443` -> `example.com`, `[::1]:80` -> `[::1]`; anything else unchanged.
fn strip_port(entry: &str) -> String {
    match entry.rsplit_once(':') {
        Some((host, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!host.contains(':') || host.ends_with(']')) =>
        {
            host.to_string()
        }
        _ => entry.to_string(),
    }
}

/// A rule in the engine's form.
#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    pub reason: String,
    pub then: Status,
    pub roles: Option<Vec<Role>>,
    pub server: Option<Vec<String>>,
    pub tool: Option<Vec<String>>,
    pub paths: Option<PathsCond>,
    pub domains: Option<DomainsCond>,
    pub lists: Option<Vec<ListCond>>,
}

#[derive(Debug, Clone)]
pub struct PathsCond {
    pub roles: Vec<Role>,
    /// As written (`~/Downloads`), for messages and `policy roots`.
    pub within_raw: String,
    /// Canonical: absolute, `~` expanded, symlinks resolved at load time.
    pub within: PathBuf,
}

#[derive(Debug, Clone)]
pub struct DomainsCond {
    pub roles: Vec<Role>,
    pub allowed: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct ListCond {
    pub roles: Vec<Role>,
    pub allowed: Vec<String>,
    pub match_type: ListType,
}

impl Rule {
    /// Rules with role-scoped conditions only take part in the evaluation of those roles.
    pub fn has_role_conditions(&self) -> bool {
        self.roles.is_some()
            || self.paths.is_some()
            || self.domains.is_some()
            || self.lists.as_ref().is_some_and(|l| !l.is_empty())
    }

    pub fn relevant_to(&self, role: Role) -> bool {
        self.roles.as_ref().is_none_or(|r| r.contains(&role))
            && self.paths.as_ref().is_none_or(|p| p.roles.contains(&role))
            && self
                .domains
                .as_ref()
                .is_none_or(|d| d.roles.contains(&role))
            && self
                .lists
                .as_ref()
                .is_none_or(|l| l.iter().any(|c| c.roles.contains(&role)))
    }
}

/// An argument's roles, possibly conditional on sibling arguments.
#[derive(Debug, Clone)]
pub enum ArgRoles {
    Static(Vec<Role>),
    Conditional(ConditionalRoles),
}

/// What the engine knows about one tool.
#[derive(Debug, Clone)]
pub struct Annotation {
    /// Argument name -> roles, in the file's order.
    pub args: Vec<(String, ArgRoles)>,
    /// The tool's JSON Schema for arguments, when known: validates calls before the engine.
    pub input_schema: Option<Value>,
    /// `readOnlyHint` from the server, when known (used by the built-in default policy).
    pub read_only: Option<bool>,
    /// True when the roles were guessed from the schema rather than read from a file.
    pub derived: bool,
}

/// Candidate rules per server and tool, as indices into `rules` in file order, so a call
/// only looks at rules that can apply to its server and tool.
#[derive(Debug, Clone, Default)]
pub struct RuleIndex {
    by_server: HashMap<String, ToolBuckets>,
    any_server: ToolBuckets,
}

#[derive(Debug, Clone, Default)]
struct ToolBuckets {
    by_tool: HashMap<String, Vec<u32>>,
    any_tool: Vec<u32>,
}

impl ToolBuckets {
    fn add(&mut self, tools: Option<&Vec<String>>, i: u32) {
        match tools {
            None => self.any_tool.push(i),
            Some(ts) => {
                for t in ts {
                    let v = self.by_tool.entry(t.clone()).or_default();
                    if v.last() != Some(&i) {
                        v.push(i);
                    }
                }
            }
        }
    }
}

impl RuleIndex {
    pub fn build(rules: &[Rule]) -> RuleIndex {
        let mut idx = RuleIndex::default();
        for (i, r) in rules.iter().enumerate() {
            let i = i as u32;
            match &r.server {
                None => idx.any_server.add(r.tool.as_ref(), i),
                Some(ss) => {
                    for s in ss {
                        idx.by_server
                            .entry(s.clone())
                            .or_default()
                            .add(r.tool.as_ref(), i);
                    }
                }
            }
        }
        idx
    }

    /// Rule indices that can apply to (server, tool), ascending (= file order).
    pub fn candidates(&self, server: &str, tool: &str) -> Vec<u32> {
        let empty: &[u32] = &[];
        let s = self.by_server.get(server);
        let lists: [&[u32]; 4] = [
            s.and_then(|b| b.by_tool.get(tool))
                .map_or(empty, |v| v.as_slice()),
            s.map_or(empty, |b| b.any_tool.as_slice()),
            self.any_server
                .by_tool
                .get(tool)
                .map_or(empty, |v| v.as_slice()),
            self.any_server.any_tool.as_slice(),
        ];
        let mut out: Vec<u32> = Vec::with_capacity(lists.iter().map(|l| l.len()).sum());
        for l in lists {
            out.extend_from_slice(l);
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// Where the rules came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySource {
    /// A `compiled-policy.json` file.
    Compiled(PathBuf),
    /// No policy file: the built-in default (see `default_policy`).
    BuiltinDefault,
}

pub(crate) fn read_json(file: &Path) -> Result<Value, LoadError> {
    let text = std::fs::read_to_string(file).map_err(|source| LoadError::Io {
        file: file.to_path_buf(),
        cause: source,
    })?;
    let mut de = serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(&mut de).map_err(|e| LoadError::Parse {
        file: file.to_path_buf(),
        field: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

fn typed<T: serde::de::DeserializeOwned>(file: &Path, v: Value) -> Result<T, LoadError> {
    serde_path_to_error::deserialize(v).map_err(|e| LoadError::Parse {
        file: file.to_path_buf(),
        field: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

/// Reads `dynamic-lists.json`: list name -> effective values.
pub fn load_lists(file: &Path) -> Result<HashMap<String, Vec<String>>, LoadError> {
    let raw: DynamicListsFile = typed(file, read_json(file)?)?;
    let mut out = HashMap::new();
    for (name, v) in raw.lists {
        let list: ResolvedList =
            serde_path_to_error::deserialize(v).map_err(|e| LoadError::List {
                file: file.to_path_buf(),
                list: name.clone(),
                message: format!("at `{}`: {}", e.path(), e.inner()),
            })?;
        let mut values: Vec<String> = Vec::new();
        for v in list.values.into_iter().chain(list.manual_additions) {
            if !list.manual_removals.contains(&v) && !values.contains(&v) {
                values.push(v);
            }
        }
        out.insert(name, values);
    }
    Ok(out)
}

/// Reads `compiled-policy.json` into engine rules. `@name` entries are expanded from
/// `lists`; a list that is missing expands to nothing, so a rule that needs it can never
/// match (fails closed) and a warning is returned.
pub fn load_rules(
    file: &Path,
    lists: &HashMap<String, Vec<String>>,
    home: Option<&Path>,
    warnings: &mut Vec<String>,
) -> Result<Vec<Rule>, LoadError> {
    let raw: CompiledPolicyFile = typed(file, read_json(file)?)?;
    let mut rules = Vec::with_capacity(raw.rules.len());
    let mut seen = std::collections::HashSet::new();
    for r in raw.rules {
        if !seen.insert(r.name.clone()) {
            warnings.push(format!(
                "{}: rule name {:?} is used twice; decisions name the first that matches",
                file.display(),
                r.name
            ));
        }
        rules.push(convert_rule(file, r, lists, home, warnings)?);
    }
    Ok(rules)
}

fn convert_rule(
    file: &Path,
    r: CompiledRule,
    lists: &HashMap<String, Vec<String>>,
    home: Option<&Path>,
    warnings: &mut Vec<String>,
) -> Result<Rule, LoadError> {
    let err = |field: &str, message: String| LoadError::Rule {
        file: file.to_path_buf(),
        rule: r.name.clone(),
        field: field.to_string(),
        message,
    };
    let c = r.condition;
    let mut expand = |field: &str, allowed: Vec<String>| -> Vec<String> {
        let mut out = Vec::with_capacity(allowed.len());
        for a in allowed {
            match a.strip_prefix('@') {
                Some(name) => match lists.get(name) {
                    Some(vals) => out.extend(vals.iter().cloned()),
                    None => warnings.push(format!(
                        "{}: rule {:?} field `{field}` refers to list @{name}, which is not \
                         loaded: it matches nothing (denied)",
                        file.display(),
                        r.name
                    )),
                },
                None => out.push(a),
            }
        }
        out
    };
    let paths = match c.paths {
        None => None,
        Some(p) => {
            if p.roles.is_empty() {
                return Err(err("if.paths.roles", "must name at least one role".into()));
            }
            if let Some(bad) = p.roles.iter().find(|r| !r.sandbox_safe()) {
                return Err(err("if.paths.roles", format!("{bad} is not a path role")));
            }
            let base = Base { cwd: None, home };
            let within = canon::canonicalize(&p.within, &base)
                .map_err(|e| err("if.paths.within", format!("{:?}: {e}", p.within)))?;
            Some(PathsCond {
                roles: p.roles,
                within_raw: p.within,
                within,
            })
        }
    };
    let domains = match c.domains {
        None => None,
        Some(d) => Some(DomainsCond {
            roles: d.roles,
            allowed: expand("if.domains.allowed", d.allowed),
        }),
    };
    let lists_c = c.lists.map(|ls| {
        ls.into_iter()
            .map(|l| ListCond {
                roles: l.roles,
                allowed: expand("if.lists.allowed", l.allowed),
                match_type: l.match_type,
            })
            .collect()
    });
    Ok(Rule {
        name: r.name,
        reason: r.reason,
        then: r.then,
        roles: c.roles,
        server: c.server,
        tool: c.tool,
        paths,
        domains,
        lists: lists_c,
    })
}

/// Reads `tool-annotations.json`: server -> tool -> annotation.
pub fn load_annotations(
    file: &Path,
) -> Result<HashMap<String, HashMap<String, Annotation>>, LoadError> {
    let raw: ToolAnnotationsFile = typed(file, read_json(file)?)?;
    let mut out: HashMap<String, HashMap<String, Annotation>> = HashMap::new();
    for (server, v) in raw.servers {
        let s: ServerAnnotations =
            serde_path_to_error::deserialize(v).map_err(|e| LoadError::Parse {
                file: file.to_path_buf(),
                field: format!("servers.{server}.{}", e.path()),
                message: e.inner().to_string(),
            })?;
        let tools = out.entry(server.clone()).or_default();
        for t in s.tools {
            let mut args = Vec::with_capacity(t.args.len());
            for (name, spec) in t.args {
                let tool_err = |message: String| LoadError::Tool {
                    file: file.to_path_buf(),
                    server: server.clone(),
                    tool: t.tool_name.clone(),
                    field: format!("args.{name}"),
                    message,
                };
                // Not through the untagged enum directly: its error would not say which role
                // is wrong.
                let spec: RoleSpec = if spec.is_array() {
                    serde_path_to_error::deserialize(spec).map(RoleSpec::Static)
                } else {
                    serde_path_to_error::deserialize(spec).map(RoleSpec::Conditional)
                }
                .map_err(|e| tool_err(format!("{} (at `{}`)", e.inner(), e.path())))?;
                args.push((
                    name.clone(),
                    match spec {
                        RoleSpec::Static(r) => ArgRoles::Static(r),
                        RoleSpec::Conditional(c) => {
                            for w in &c.when {
                                let ops = usize::from(w.condition.equals.is_some())
                                    + usize::from(w.condition.one_of.is_some())
                                    + usize::from(w.condition.is.is_some());
                                if ops != 1 {
                                    return Err(tool_err(
                                        "each `when` condition needs exactly one of equals, in, is"
                                            .into(),
                                    ));
                                }
                            }
                            ArgRoles::Conditional(c)
                        }
                    },
                ));
            }
            tools.insert(
                t.tool_name,
                Annotation {
                    args,
                    input_schema: t.input_schema,
                    read_only: None,
                    derived: false,
                },
            );
        }
    }
    Ok(out)
}
