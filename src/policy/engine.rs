//! Evaluation: the order of checks, role by role, path by path.
//!
//! 1. Unknown or unannotated tool: deny.
//! 2. Arguments checked against the tool's schema; an argument the annotation does not list
//!    denies; role-bearing arguments must be strings or arrays of strings.
//!    With guessed annotations (the built-in default, or no `tool-annotations.json`), every
//!    string at any depth of an argument without a path role that reads as a path or
//!    `file:` URI (`inferred_paths`, `roots::path_like`) is a path value too, read by a
//!    read-only tool and written by any other: a guess by name must never let a path
//!    through unchecked.
//! 3. Every path-role value is canonicalised against the server's cwd and home; a bad path
//!    denies (so does a process's own view, `/proc/self`..., and a Unicode-ambiguous name,
//!    see `canon::resolve_checked`), and so does a path whose walk follows a symlink inside
//!    the session sandbox dir (which every server can write: a link planted there by one
//!    server must not steer another).
//! 4. Protected paths deny.
//! 5. URL roles outside the server's configured domain allowlist escalate.
//! 6. Roles whose paths all lie in the session sandbox dir are resolved (allowed).
//! 7. Each remaining resource role goes through the rules (or the built-in default): values
//!    are discharged one by one by the first rule that matches them, undischarged values
//!    deny, the most restrictive result across values and roles wins (deny > escalate >
//!    allow).
//!
//! Pure apart from canonicalisation (step 3). Must never allow when a step cannot decide.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::domains;
use super::load::{Annotation, ArgRoles, Rule};
use super::model::{
    ListType, MostRestrictive, Presence, Role, RoleCategory, RoleCondition, Status,
};
use super::{validate, CallContext, Decision, Policy, PolicySource};
use crate::roots::canon::{self, Base};
use crate::roots::path_like::looks_like_path;
use crate::roots::resolved::CallPaths;

pub(crate) const DEFAULT_DENY: &str = "default-deny";
pub(crate) const SANDBOX_ALLOW: &str = "structural-sandbox-allow";

/// One call after the structural steps: resolved roles and canonical paths.
pub(crate) struct Call<'a> {
    pub ctx: &'a CallContext<'a>,
    /// Argument name -> roles (conditional roles resolved against this call).
    pub args: Vec<(&'a str, Cow<'a, [Role]>)>,
    /// Distinct resource roles of the tool, in argument order (the evaluation order).
    pub roles: Vec<Role>,
    /// Raw path value -> canonical path, for every path-role value.
    pub paths: Vec<(&'a str, PathBuf)>,
    /// Path values found by `inferred_paths` in arguments without a path role, with the
    /// roles they are read with.
    pub inferred: Vec<(&'a str, Vec<Role>)>,
}

impl<'a> Call<'a> {
    /// String values of arguments whose roles intersect `targets` (arrays flattened).
    pub fn values(&self, targets: &[Role]) -> Vec<&'a str> {
        let mut out = Vec::new();
        for (name, roles) in &self.args {
            if !roles.iter().any(|r| targets.contains(r)) {
                continue;
            }
            push_strings(self.ctx.arguments.get(*name), &mut out);
        }
        for (v, roles) in &self.inferred {
            if roles.iter().any(|r| targets.contains(r)) {
                out.push(v);
            }
        }
        out
    }

    /// URL values with the role they are read as (the argument's first role in `targets`).
    pub fn url_values(&self, targets: &[Role]) -> Vec<(&'a str, Role)> {
        let mut out = Vec::new();
        for (name, roles) in &self.args {
            let Some(role) = roles.iter().find(|r| targets.contains(r)) else {
                continue;
            };
            let mut vals = Vec::new();
            push_strings(self.ctx.arguments.get(*name), &mut vals);
            out.extend(vals.into_iter().map(|v| (v, *role)));
        }
        out
    }

    /// The canonical form of a path value (computed in step 3 for every path-role value).
    pub fn canonical(&self, raw: &str) -> Option<&Path> {
        self.paths
            .iter()
            .find(|(r, _)| *r == raw)
            .map(|(_, p)| p.as_path())
    }

    fn tool_has_any_role(&self, roles: &[Role]) -> bool {
        self.args
            .iter()
            .map(|(_, rs)| rs.as_ref())
            .chain(self.inferred.iter().map(|(_, rs)| rs.as_slice()))
            .any(|rs| rs.iter().any(|r| roles.contains(r)))
    }
}

fn resource_roles(args: &[(&str, Cow<'_, [Role]>)], inferred: &[(&str, Vec<Role>)]) -> Vec<Role> {
    let mut out: Vec<Role> = Vec::new();
    let all = args
        .iter()
        .map(|(_, rs)| rs.as_ref())
        .chain(inferred.iter().map(|(_, rs)| rs.as_slice()));
    for roles in all {
        for r in roles.iter() {
            if r.is_resource() && !out.contains(r) {
                out.push(*r);
            }
        }
    }
    out
}

fn push_strings<'a>(v: Option<&'a Value>, out: &mut Vec<&'a str>) {
    match v {
        Some(Value::String(s)) => out.push(s),
        Some(Value::Array(items)) => out.extend(items.iter().filter_map(Value::as_str)),
        _ => {}
    }
}

fn deny(rule: &str, reason: impl Into<String>) -> Decision {
    Decision::new(Status::Deny, rule, reason, Vec::new())
}

/// `shared`: the call's shared resolutions (`CallPaths`), when the gateway judges the call in
/// several stages; `None` resolves here.
pub(crate) fn evaluate(
    policy: &Policy,
    ctx: &CallContext<'_>,
    shared: Option<&CallPaths>,
) -> Decision {
    // 1. Unknown tools.
    let Some(ann) = policy.annotation(ctx.server, ctx.tool) else {
        return deny(
            "structural-unknown-tool",
            format!(
                "unknown or unannotated tool {}/{}: denied until it is annotated",
                ctx.server, ctx.tool
            ),
        );
    };
    // 2. Arguments.
    if let Err(why) = validate::check_arguments(ann.input_schema.as_ref(), ctx.arguments) {
        return deny("structural-invalid-arguments", why.to_string());
    }
    // An argument the annotation does not know has no roles, so nothing would check it: a
    // stale annotation file must not let a new path argument through unjudged.
    if let Some(name) = ctx
        .arguments
        .keys()
        .find(|k| !ann.args.iter().any(|(n, _)| n == *k))
    {
        return deny(
            "structural-unannotated-argument",
            format!(
                "argument {name:?} of {}/{} has no annotation (re-annotate the server's tools)",
                ctx.server, ctx.tool
            ),
        );
    }
    let args = resolve_roles(ann, ctx.arguments);
    for (name, roles) in &args {
        if roles.iter().all(|r| *r == Role::None) {
            continue;
        }
        match ctx.arguments.get(*name) {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => {}
            Some(_) => {
                return deny(
                    "structural-invalid-arguments",
                    format!(
                        "argument {name:?} carries roles {} but is not a string or an array of \
                         strings",
                        join_roles(roles)
                    ),
                )
            }
        }
    }
    // 3. Canonical paths.
    let base = Base {
        cwd: ctx.cwd,
        home: ctx.home,
    };
    let inferred = inferred_paths(ann, ctx.arguments, &args);
    let roles = resource_roles(&args, &inferred);
    let mut call = Call {
        ctx,
        args,
        roles,
        paths: Vec::new(),
        inferred,
    };
    let path_roles: Vec<Role> = call
        .roles
        .iter()
        .copied()
        .filter(|r| r.category() == RoleCategory::Path)
        .collect();
    let mut paths = Vec::new();
    for raw in call.values(&path_roles) {
        if paths.iter().any(|(r, _)| *r == raw) {
            continue;
        }
        let resolved = match shared {
            Some(memo) => memo.traced(raw, &base),
            None => canon::canonicalize_traced(raw, &base),
        };
        match resolved {
            Ok(r) => {
                if let Some(link) = r.links.iter().find(|l| ctx.scope.in_sandbox(l)) {
                    return Decision::new(
                        Status::Deny,
                        "structural-sandbox-symlink",
                        format!(
                            "{} goes through the symlink {} in the session sandbox directory, \
                             which every server can write: links there are not followed",
                            truncate(raw),
                            link.display()
                        ),
                        path_roles.clone(),
                    );
                }
                paths.push((raw, r.path))
            }
            Err(e) => {
                return Decision::new(
                    Status::Deny,
                    "structural-bad-path",
                    format!("{e}: {}", truncate(raw)),
                    path_roles.clone(),
                )
            }
        }
    }
    call.paths = paths;
    // 4. Protected paths.
    if let Some((_, p)) = call.paths.iter().find(|(_, p)| ctx.scope.is_protected(p)) {
        return Decision::new(
            Status::Deny,
            "structural-protected-path",
            format!("access to a protected path is forbidden: {}", p.display()),
            path_roles,
        );
    }
    // 5. Domain gate.
    let gate = policy.options.server_domains.get(ctx.server);
    if let (Some(allowed), PolicySource::Compiled(_)) = (gate, &policy.source) {
        let url_roles = [Role::FetchUrl, Role::GitRemoteUrl];
        for (v, role) in call.url_values(&url_roles) {
            let d = domains::domain_for(v, role);
            if !domains::matches_any(&d, allowed) {
                return Decision::new(
                    Status::Escalate,
                    "structural-domain-escalate",
                    format!(
                        "{d:?} is not in the allowed domains of server {:?}",
                        ctx.server
                    ),
                    vec![role],
                );
            }
        }
    }
    // 6. Sandbox containment, role by role.
    let resolved: Vec<Role> = if ctx.scope.sandbox_dir.is_some() {
        path_roles
            .iter()
            .copied()
            .filter(|r| r.sandbox_safe())
            .filter(|r| {
                let vals = call.values(&[*r]);
                !vals.is_empty()
                    && vals
                        .iter()
                        .all(|v| call.canonical(v).is_some_and(|p| ctx.scope.in_sandbox(p)))
            })
            .collect()
    } else {
        Vec::new()
    };
    // 7. Rules.
    match &policy.source {
        PolicySource::BuiltinDefault => super::default_policy::evaluate(policy, &call, ann),
        PolicySource::Compiled(_) => compiled(policy, &call, &resolved),
    }
}

fn compiled(policy: &Policy, call: &Call<'_>, resolved: &[Role]) -> Decision {
    let all = call.roles.clone();
    let todo: Vec<Role> = all
        .iter()
        .copied()
        .filter(|r| !resolved.contains(r))
        .collect();
    if !all.is_empty() && todo.is_empty() {
        return Decision::new(
            Status::Allow,
            SANDBOX_ALLOW,
            "all path arguments are inside the session sandbox directory",
            all,
        );
    }
    let candidates = policy.index.candidates(call.ctx.server, call.ctx.tool);
    let rules = candidates.iter().map(|&i| &policy.rules[i as usize]);
    if todo.is_empty() {
        // No resource roles at all: the first rule that matches decides.
        for rule in rules {
            if matches(rule, call, None) {
                return from_rule(rule, Vec::new());
            }
        }
        return default_deny(Vec::new());
    }
    let mut combined = MostRestrictive::default();
    for role in todo.iter().copied() {
        if let Some(deny) = combined.add(role, for_role(policy, &candidates, call, role)) {
            return deny;
        }
    }
    // `todo` is not empty, so at least one role was added; deny if that ever changes.
    combined
        .finish(all)
        .unwrap_or_else(|| default_deny(Vec::new()))
}

fn from_rule(rule: &Rule, roles: Vec<Role>) -> Decision {
    Decision::new(rule.then, &rule.name, rule.reason.clone(), roles)
}

fn default_deny(roles: Vec<Role>) -> Decision {
    Decision::new(
        Status::Deny,
        DEFAULT_DENY,
        "no policy rule covers this call: denied by default",
        roles,
    )
}

/// One role through the rule chain: each value is discharged by the first rule that
/// matches it; undischarged values deny; the most restrictive result wins.
fn for_role(policy: &Policy, candidates: &[u32], call: &Call<'_>, role: Role) -> Decision {
    let relevant = |rule: &&Rule| !rule.has_role_conditions() || rule.relevant_to(role);
    let rules = || {
        candidates
            .iter()
            .map(|&i| &policy.rules[i as usize])
            .filter(relevant)
    };
    let values = call.values(&[role]);
    if values.is_empty() {
        return rules()
            .find(|r| matches(r, call, Some(role)))
            .map_or_else(|| default_deny(vec![role]), |r| from_rule(r, vec![role]));
    }
    let is_path = role.category() == RoleCategory::Path;
    let mut remaining: Vec<&str> = values;
    remaining.dedup();
    let mut best: Option<Decision> = None;
    if is_path && role.sandbox_safe() && call.ctx.scope.sandbox_dir.is_some() {
        let before = remaining.len();
        remaining.retain(|v| {
            !call
                .canonical(v)
                .is_some_and(|p| call.ctx.scope.in_sandbox(p))
        });
        if remaining.len() < before {
            best = Some(Decision::new(
                Status::Allow,
                SANDBOX_ALLOW,
                "path inside the session sandbox directory",
                vec![role],
            ));
        }
    }
    for rule in rules() {
        if remaining.is_empty() {
            break;
        }
        if !non_path_conditions(rule, call) {
            continue;
        }
        if (rule.domains.is_some() || rule.lists.is_some())
            && !(domains_ok(rule, call, Some(role)) && lists_ok(rule, call, Some(role)))
        {
            continue;
        }
        let before = remaining.len();
        match &rule.paths {
            Some(p) => remaining.retain(|v| {
                !(is_path
                    && call
                        .canonical(v)
                        .is_some_and(|c| canon::is_within(c, &p.within)))
            }),
            None => remaining.clear(),
        }
        if remaining.len() == before {
            continue;
        }
        let d = from_rule(rule, vec![role]);
        let replace = best.as_ref().is_none_or(|b| {
            d.status.severity() > b.status.severity()
                || (d.status == b.status && b.rule == SANDBOX_ALLOW)
        });
        if replace {
            best = Some(d);
        }
    }
    if !remaining.is_empty() {
        return default_deny(vec![role]);
    }
    best.unwrap_or_else(|| default_deny(vec![role]))
}

fn non_path_conditions(rule: &Rule, call: &Call<'_>) -> bool {
    rule.roles
        .as_ref()
        .is_none_or(|r| call.tool_has_any_role(r))
        && rule
            .server
            .as_ref()
            .is_none_or(|s| s.iter().any(|x| x == call.ctx.server))
        && rule
            .tool
            .as_ref()
            .is_none_or(|t| t.iter().any(|x| x == call.ctx.tool))
}

/// Every condition of the rule holds for the call (values scoped to `role` when given).
fn matches(rule: &Rule, call: &Call<'_>, role: Option<Role>) -> bool {
    if !non_path_conditions(rule, call) {
        return false;
    }
    if let Some(p) = &rule.paths {
        let targets = role.map_or_else(|| p.roles.clone(), |r| vec![r]);
        let vals = call.values(&targets);
        if vals.is_empty()
            || !vals.iter().all(|v| {
                call.canonical(v)
                    .is_some_and(|c| canon::is_within(c, &p.within))
            })
        {
            return false;
        }
    }
    domains_ok(rule, call, role) && lists_ok(rule, call, role)
}

fn domains_ok(rule: &Rule, call: &Call<'_>, role: Option<Role>) -> bool {
    let Some(d) = &rule.domains else { return true };
    let targets = role.map_or_else(|| d.roles.clone(), |r| vec![r]);
    let vals = call.url_values(&targets);
    !vals.is_empty()
        && vals
            .iter()
            .all(|(v, r)| domains::matches_any(&domains::domain_for(v, *r), &d.allowed))
}

fn lists_ok(rule: &Rule, call: &Call<'_>, role: Option<Role>) -> bool {
    let Some(lists) = &rule.lists else {
        return true;
    };
    lists.iter().all(|lc| {
        let targets = match role {
            Some(r) if lc.roles.contains(&r) => vec![r],
            _ => lc.roles.clone(),
        };
        let vals = call.values(&targets);
        !vals.is_empty()
            && vals
                .iter()
                .all(|v| lc.allowed.iter().any(|p| list_match(lc.match_type, v, p)))
    })
}

fn list_match(t: ListType, v: &str, pattern: &str) -> bool {
    match t {
        ListType::Domains => domains::matches_pattern(v, pattern),
        ListType::Emails => v.eq_ignore_ascii_case(pattern),
        ListType::Identifiers => v == pattern,
    }
}

/// Conditional roles resolved against the call: first `when` that holds, else the default.
/// One path-role value of a call (an array argument gives one per element) and the path
/// roles of its argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathArg<'a> {
    pub value: &'a str,
    pub roles: Vec<Role>,
}

impl PathArg<'_> {
    /// True when the argument may write, delete or rewrite history at the path.
    pub fn writes(&self) -> bool {
        self.roles.iter().any(|r| r.writes())
    }
}

/// Path values hidden from a guessed annotation: with `ann.derived`, every string at any
/// depth of an argument without a path or URL role that `looks_like_path`, with the
/// roles a guessed path argument of this tool gets (read for a read-only tool; read, write
/// and delete otherwise, since the guess errs towards more). Empty for annotations a person
/// wrote: there `none` means none.
fn inferred_paths<'a>(
    ann: &Annotation,
    arguments: &'a serde_json::Map<String, Value>,
    resolved: &[(&str, Cow<'_, [Role]>)],
) -> Vec<(&'a str, Vec<Role>)> {
    if !ann.derived {
        return Vec::new();
    }
    let roles = if ann.read_only == Some(true) {
        vec![Role::ReadPath]
    } else {
        vec![Role::ReadPath, Role::WritePath, Role::DeletePath]
    };
    // Depth is bounded by serde_json's own recursion limit (128) on what it parsed.
    fn walk<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::String(s) if looks_like_path(s) => out.push(s),
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            Value::Object(map) => map.values().for_each(|i| walk(i, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    for (name, v) in arguments {
        let typed = resolved.iter().any(|(n, rs)| {
            n == name
                && rs
                    .iter()
                    .any(|r| matches!(r.category(), RoleCategory::Path | RoleCategory::Url))
        });
        if !typed {
            walk(v, &mut found);
        }
    }
    found.into_iter().map(|v| (v, roles.clone())).collect()
}

/// The path-role values of a call, resolved exactly as `evaluate` resolves them (conditional
/// roles and paths inferred for guessed annotations included). `None` for a tool the policy
/// does not know (which `evaluate` denies).
pub(crate) fn path_arguments<'a>(
    policy: &Policy,
    server: &str,
    tool: &str,
    arguments: &'a serde_json::Map<String, Value>,
) -> Option<Vec<PathArg<'a>>> {
    let ann = policy.annotation(server, tool)?;
    let resolved = resolve_roles(ann, arguments);
    let mut out: Vec<PathArg<'a>> = inferred_paths(ann, arguments, &resolved)
        .into_iter()
        .map(|(value, roles)| PathArg { value, roles })
        .collect();
    for (name, roles) in resolved {
        let path_roles: Vec<Role> = roles
            .iter()
            .copied()
            .filter(|r| r.category() == RoleCategory::Path)
            .collect();
        if path_roles.is_empty() {
            continue;
        }
        let mut vals = Vec::new();
        push_strings(arguments.get(name), &mut vals);
        out.extend(vals.into_iter().map(|value| PathArg {
            value,
            roles: path_roles.clone(),
        }));
    }
    Some(out)
}

/// The URL-role values of a call, each with the first URL role of its argument (the role
/// `evaluate` reads it as). `None` for a tool the policy does not know.
pub(crate) fn url_arguments<'a>(
    policy: &Policy,
    server: &str,
    tool: &str,
    arguments: &'a serde_json::Map<String, Value>,
) -> Option<Vec<(&'a str, Role)>> {
    let ann = policy.annotation(server, tool)?;
    let mut out = Vec::new();
    for (name, roles) in resolve_roles(ann, arguments) {
        let Some(role) = roles
            .iter()
            .copied()
            .find(|r| r.category() == RoleCategory::Url)
        else {
            continue;
        };
        let mut vals = Vec::new();
        push_strings(arguments.get(name), &mut vals);
        out.extend(vals.into_iter().map(|v| (v, role)));
    }
    Some(out)
}

/// Names of the arguments present in the call whose roles are neither paths, URLs nor
/// `none` (identifiers such as a GitHub repo, or opaque values such as an email address a
/// `lists` condition reads). A remembered approval bounds only paths and URLs, so a call with
/// any of these is never remembered or matched. `None` for a tool the policy does not know.
pub(crate) fn unscoped_arguments<'a>(
    policy: &Policy,
    server: &str,
    tool: &str,
    arguments: &'a serde_json::Map<String, Value>,
) -> Option<Vec<&'a str>> {
    let ann = policy.annotation(server, tool)?;
    let mut out = Vec::new();
    for (name, roles) in resolve_roles(ann, arguments) {
        let unscoped = roles.iter().any(|r| {
            *r != Role::None && !matches!(r.category(), RoleCategory::Path | RoleCategory::Url)
        });
        if let Some((key, v)) = arguments.get_key_value(name) {
            if unscoped && !v.is_null() {
                out.push(key.as_str());
            }
        }
    }
    Some(out)
}

fn resolve_roles<'a>(
    ann: &'a Annotation,
    args: &serde_json::Map<String, Value>,
) -> Vec<(&'a str, Cow<'a, [Role]>)> {
    ann.args
        .iter()
        .map(|(name, spec)| {
            let roles: Cow<'a, [Role]> = match spec {
                ArgRoles::Static(r) => Cow::Borrowed(r.as_slice()),
                ArgRoles::Conditional(c) => Cow::Borrowed(
                    c.when
                        .iter()
                        .find(|w| condition_holds(&w.condition, args))
                        .map_or(c.default.as_slice(), |w| w.roles.as_slice()),
                ),
            };
            (name.as_str(), roles)
        })
        .collect()
}

fn condition_holds(c: &RoleCondition, args: &serde_json::Map<String, Value>) -> bool {
    let v = args.get(&c.arg);
    if let Some(eq) = &c.equals {
        return v == Some(eq);
    }
    if let Some(set) = &c.one_of {
        return v.is_some_and(|v| set.contains(v));
    }
    let present = v.is_some_and(|v| !v.is_null());
    match c.is {
        Some(Presence::Present) => present,
        Some(Presence::Absent) => !present,
        Some(Presence::Truthy) => v.is_some_and(truthy),
        Some(Presence::Falsy) => !v.is_some_and(truthy),
        // Load refuses conditions without an operator; never true if one slips through.
        None => false,
    }
}

/// JavaScript truthiness, as IronCurtain's annotations assume.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

fn join_roles(roles: &[Role]) -> String {
    roles
        .iter()
        .map(|r| r.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn truncate(s: &str) -> String {
    const MAX: usize = 200;
    if s.len() <= MAX {
        return s.replace('\0', "\\0");
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", s[..end].replace('\0', "\\0"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cond(v: Value) -> RoleCondition {
        serde_json::from_value(v).unwrap()
    }

    fn args(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn role_conditions_follow_javascript_semantics() {
        let a = args(json!({"dryRun": true, "mode": "delete", "n": 0, "s": "", "nul": null}));
        assert!(condition_holds(
            &cond(json!({"arg":"dryRun","equals":true})),
            &a
        ));
        assert!(!condition_holds(
            &cond(json!({"arg":"dryRun","equals":"true"})),
            &a
        ));
        assert!(condition_holds(
            &cond(json!({"arg":"mode","in":["delete","remove"]})),
            &a
        ));
        assert!(!condition_holds(
            &cond(json!({"arg":"missing","in":["x"]})),
            &a
        ));
        assert!(condition_holds(
            &cond(json!({"arg":"n","is":"present"})),
            &a
        ));
        assert!(condition_holds(
            &cond(json!({"arg":"nul","is":"absent"})),
            &a
        ));
        assert!(condition_holds(
            &cond(json!({"arg":"missing","is":"absent"})),
            &a
        ));
        assert!(condition_holds(&cond(json!({"arg":"n","is":"falsy"})), &a));
        assert!(condition_holds(&cond(json!({"arg":"s","is":"falsy"})), &a));
        assert!(condition_holds(
            &cond(json!({"arg":"mode","is":"truthy"})),
            &a
        ));
        assert!(!condition_holds(
            &cond(json!({"arg":"missing","is":"truthy"})),
            &a
        ));
    }

    #[test]
    fn first_matching_when_clause_wins_else_default() {
        let ann = Annotation {
            args: vec![(
                "target".into(),
                ArgRoles::Conditional(
                    serde_json::from_value(json!({
                        "default": ["read-path", "delete-path"],
                        "when": [
                            {"condition": {"arg": "dry", "equals": true}, "roles": ["read-path"]},
                            {"condition": {"arg": "dry", "is": "present"}, "roles": ["delete-path"]}
                        ]
                    }))
                    .unwrap(),
                ),
            )],
            input_schema: None,
            read_only: None,
            derived: false,
        };
        let roles = |v: Value| resolve_roles(&ann, &args(v))[0].1.to_vec();
        assert_eq!(roles(json!({"dry": true})), vec![Role::ReadPath]);
        assert_eq!(roles(json!({"dry": false})), vec![Role::DeletePath]);
        assert_eq!(roles(json!({})), vec![Role::ReadPath, Role::DeletePath]);
    }
}
