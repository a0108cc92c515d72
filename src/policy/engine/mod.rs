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
//!
//! The steps live here (`evaluate`); what an argument is read as lives in `args`, the call as
//! the rules see it in `call`, and step 7 for a compiled policy in `rules` (the built-in
//! default's step 7 is `super::default_policy`).

mod args;
mod call;
mod rules;

use serde_json::Value;

use super::domains;
use super::model::{Role, RoleCategory, Status};
use super::{validate, CallContext, Decision, Policy, PolicySource};
use crate::roots::canon::{self, Base};
use crate::roots::resolved::CallPaths;

use args::{inferred_paths, resolve_roles};
use call::resource_roles;
use rules::compiled;

pub use args::PathArg;
pub(crate) use args::{path_arguments, unscoped_arguments, url_arguments};
pub(crate) use call::Call;

pub(crate) const DEFAULT_DENY: &str = "default-deny";
pub(crate) const SANDBOX_ALLOW: &str = "structural-sandbox-allow";

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
