//! The policy engine: one tool call in, one decision out (allow, deny or escalate, with the
//! rule, the reason and the argument roles involved). Reads IronCurtain's formats
//! (`compiled-policy.json`, `tool-annotations.json`, `dynamic-lists.json`) so existing
//! policies work unchanged; without files it applies a built-in default (`default_policy`).
//!
//! Where it sits: the gateway calls [`Policy::evaluate`] for every call after routing and
//! before approval and forwarding; `roots::derive` reads the loaded rules to decide where each
//! server may operate.
//!
//! What it must never do: perform I/O while evaluating other than canonicalising path
//! arguments (symlinks are resolved through the deepest existing ancestor); keep mutable
//! state between calls; allow on doubt. Every error path ends in a deny that says why.
//!
//! The public API:
//! - [`Policy::load`]`(&PolicyPaths, PolicyOptions) -> Result<Policy, LoadError>`
//! - [`Policy::register_tools`] to tell a default policy what a server's tools look like
//! - [`Scope::new`] once per session (sandbox dir, protected paths, canonicalised once)
//! - [`Policy::evaluate`]`(&CallContext) -> Decision`

pub mod annotate;
pub mod default_policy;
pub mod domains;
pub mod engine;
pub mod load;
pub mod model;
pub mod scenarios;
pub mod validate;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use annotate::ToolInfo;
pub use engine::PathArg;
pub use load::{Annotation, LoadError, PolicyOptions, PolicyPaths, PolicySource, Rule};
pub use model::{Role, Status};

use crate::roots::canon::{self, Base, PathError};

/// A loaded policy: rules (or the built-in default), tool annotations and options.
/// Immutable after loading except for [`Policy::register_tools`]; share it behind an `Arc`.
#[derive(Debug, Clone)]
pub struct Policy {
    pub(crate) source: PolicySource,
    pub(crate) rules: Vec<Rule>,
    pub(crate) index: load::RuleIndex,
    /// server -> tool -> annotation.
    pub(crate) annotations: HashMap<String, HashMap<String, Annotation>>,
    /// True when a `tool-annotations.json` was loaded: then tools it does not list are denied
    /// and no roles are guessed.
    pub(crate) annotations_from_file: bool,
    pub(crate) options: PolicyOptions,
    warnings: Vec<String>,
}

/// The session-wide paths every call is checked against. Build it once per session: the
/// paths are canonicalised here, not per call.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// The session sandbox dir: path roles inside it are allowed.
    pub sandbox_dir: Option<PathBuf>,
    /// Always denied (except inside the sandbox dir): palisade's config, policy, annotations,
    /// lists and audit files, plus configured ones.
    pub protected: Vec<PathBuf>,
}

impl Scope {
    /// Canonicalises the sandbox dir and protected paths (`~` against `home`). They must be
    /// absolute or start with `~`.
    pub fn new(
        sandbox_dir: Option<&Path>,
        protected: &[PathBuf],
        home: Option<&Path>,
    ) -> Result<Scope, PathError> {
        let base = Base { cwd: None, home };
        let canon_one = |p: &Path| -> Result<PathBuf, PathError> {
            let s = p.to_str().ok_or(PathError::Encoding)?;
            canon::canonicalize(s, &base)
        };
        Ok(Scope {
            sandbox_dir: sandbox_dir.map(canon_one).transpose()?,
            protected: protected
                .iter()
                .map(|p| canon_one(p))
                .collect::<Result<_, _>>()?,
        })
    }

    pub fn in_sandbox(&self, p: &Path) -> bool {
        self.sandbox_dir
            .as_deref()
            .is_some_and(|s| canon::is_within(p, s))
    }

    /// Inside a protected path. The sandbox dir is carved out of a protected directory that
    /// contains it (IronCurtain's `~/.ironcurtain/sandbox` sits under protected
    /// `~/.ironcurtain`), but a protected file inside the sandbox dir stays protected: the
    /// carve-out never lets a sandbox chosen too wide expose palisade's own files.
    pub fn is_protected(&self, p: &Path) -> bool {
        self.protected.iter().any(|pp| {
            canon::is_within(p, pp)
                && !self.sandbox_dir.as_deref().is_some_and(|s| {
                    s != pp.as_path() && canon::is_within(s, pp) && canon::is_within(p, s)
                })
        })
    }
}

/// One call as the engine sees it.
#[derive(Debug, Clone, Copy)]
pub struct CallContext<'a> {
    pub server: &'a str,
    pub tool: &'a str,
    pub arguments: &'a serde_json::Map<String, serde_json::Value>,
    /// The server's working directory and home: relative and `~` paths are resolved as the
    /// server would resolve them. Without a cwd, relative paths are denied (BAD_PATH).
    pub cwd: Option<&'a Path>,
    pub home: Option<&'a Path>,
    pub scope: &'a Scope,
    /// The server's current root set (canonical). Only the built-in default policy reads
    /// it; compiled policies decide from their own rules.
    pub roots: &'a [PathBuf],
}

/// The engine's answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Decision {
    pub status: Status,
    /// The compiled rule's name, or a `structural-*` / `default-*` name.
    pub rule: String,
    pub reason: String,
    /// The roles that produced this status (for escalate: the escalated roles).
    pub roles: Vec<Role>,
}

impl Decision {
    pub(crate) fn new(
        status: Status,
        rule: &str,
        reason: impl Into<String>,
        roles: Vec<Role>,
    ) -> Self {
        Decision {
            status,
            rule: rule.to_string(),
            reason: reason.into(),
            roles,
        }
    }
}

impl Policy {
    /// Loads the given files; with no policy file, the built-in default. Lists are expanded
    /// and `paths.within` canonicalised now, so evaluation does no parsing.
    pub fn load(paths: &PolicyPaths, options: PolicyOptions) -> Result<Policy, LoadError> {
        let mut warnings = Vec::new();
        let lists = match &paths.lists {
            Some(f) => load::load_lists(f)?,
            None => HashMap::new(),
        };
        let home = options
            .home
            .clone()
            .or_else(|| std::env::var_os("HOME").map(PathBuf::from));
        let (source, rules) = match &paths.policy {
            Some(f) => (
                PolicySource::Compiled(f.clone()),
                load::load_rules(f, &lists, home.as_deref(), &mut warnings)?,
            ),
            None => (PolicySource::BuiltinDefault, Vec::new()),
        };
        let (annotations, annotations_from_file) = match &paths.annotations {
            Some(f) => (load::load_annotations(f)?, true),
            None => (HashMap::new(), false),
        };
        if matches!(source, PolicySource::Compiled(_)) && !annotations_from_file {
            warnings.push(
                "a compiled policy without tool-annotations.json: roles are guessed from each \
                 server's tool schemas"
                    .to_string(),
            );
        }
        let index = load::RuleIndex::build(&rules);
        Ok(Policy {
            source,
            rules,
            index,
            annotations,
            annotations_from_file,
            options: PolicyOptions { home, ..options },
            warnings,
        })
    }

    /// The built-in default policy with default options (`$HOME` for `~`).
    pub fn builtin_default() -> Policy {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        Policy {
            source: PolicySource::BuiltinDefault,
            rules: Vec::new(),
            index: load::RuleIndex::default(),
            annotations: HashMap::new(),
            annotations_from_file: false,
            options: PolicyOptions {
                home,
                ..PolicyOptions::default()
            },
            warnings: Vec::new(),
        }
    }

    /// Tells the policy which tools a server offers (from `tools/list`). Without an
    /// annotation file, each tool's roles are guessed from its schema and hints; with one,
    /// only the live input schema is recorded where the file has none (for argument checks).
    pub fn register_tools(&mut self, server: &str, tools: &[ToolInfo<'_>]) {
        let known = self.annotations.entry(server.to_string()).or_default();
        for t in tools {
            match known.get_mut(t.name) {
                Some(a) => {
                    if a.input_schema.is_none() {
                        a.input_schema = Some(t.input_schema.clone());
                    }
                    if a.read_only.is_none() {
                        a.read_only = t.read_only_hint;
                    }
                }
                None if !self.annotations_from_file => {
                    known.insert(t.name.to_string(), annotate::derive_annotation(t));
                }
                None => {}
            }
        }
    }

    pub fn source(&self) -> &PolicySource {
        &self.source
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Problems that did not stop loading (a missing `@list`, duplicate rule names).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    pub fn annotation(&self, server: &str, tool: &str) -> Option<&Annotation> {
        self.annotations.get(server)?.get(tool)
    }

    /// Servers the annotations know, for `policy roots`.
    pub fn annotated_servers(&self) -> impl Iterator<Item = &str> {
        self.annotations.keys().map(String::as_str)
    }

    /// The path-role argument values of a call and their roles, as `evaluate` sees them
    /// (for the gateway's root check). `None` when the tool is not known to the policy.
    pub fn path_arguments<'a>(
        &self,
        server: &str,
        tool: &str,
        arguments: &'a serde_json::Map<String, serde_json::Value>,
    ) -> Option<Vec<engine::PathArg<'a>>> {
        engine::path_arguments(self, server, tool, arguments)
    }

    /// The URL-role argument values of a call (`fetch-url`, `git-remote-url`), each with the
    /// role it is read as, resolved as `evaluate` resolves roles. `None` for an unknown tool.
    pub fn url_arguments<'a>(
        &self,
        server: &str,
        tool: &str,
        arguments: &'a serde_json::Map<String, serde_json::Value>,
    ) -> Option<Vec<(&'a str, Role)>> {
        engine::url_arguments(self, server, tool, arguments)
    }

    /// Arguments of a call whose roles a remembered approval cannot bound (identifiers,
    /// opaque values); see `engine::unscoped_arguments`. `None` for an unknown tool.
    pub fn unscoped_arguments<'a>(
        &self,
        server: &str,
        tool: &str,
        arguments: &'a serde_json::Map<String, serde_json::Value>,
    ) -> Option<Vec<&'a str>> {
        engine::unscoped_arguments(self, server, tool, arguments)
    }

    /// Decides one call. Pure apart from canonicalising path arguments.
    pub fn evaluate(&self, ctx: &CallContext<'_>) -> Decision {
        engine::evaluate(self, ctx, None)
    }

    /// `evaluate`, taking the call's path resolutions from (and leaving them in) `paths`, so
    /// the gateway's other stages judge the same resolution without walking the disk again.
    pub fn evaluate_sharing(
        &self,
        ctx: &CallContext<'_>,
        paths: &crate::roots::resolved::CallPaths,
    ) -> Decision {
        engine::evaluate(self, ctx, Some(paths))
    }
}
