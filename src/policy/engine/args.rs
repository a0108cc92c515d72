//! What each argument of a call is read as: its roles from the tool's annotation, with
//! conditional roles resolved against the call's own arguments (JavaScript truthiness, as the
//! annotations assume), and, for a guessed annotation, the path values hidden in arguments
//! that have no path role. The gateway asks the same questions (`path_arguments`,
//! `url_arguments`, `unscoped_arguments`) so that roots, widening and remembered approvals
//! read a call exactly as the engine does. Pure.

use std::borrow::Cow;

use serde_json::Value;

use crate::policy::load::{Annotation, ArgRoles};
use crate::policy::model::{Presence, Role, RoleCategory, RoleCondition};
use crate::policy::Policy;
use crate::roots::path_like::looks_like_path;

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
pub(super) fn inferred_paths<'a>(
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

/// Conditional roles resolved against the call: first `when` that holds, else the default.
pub(super) fn resolve_roles<'a>(
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

pub(super) fn push_strings<'a>(v: Option<&'a Value>, out: &mut Vec<&'a str>) {
    match v {
        Some(Value::String(s)) => out.push(s),
        Some(Value::Array(items)) => out.extend(items.iter().filter_map(Value::as_str)),
        _ => {}
    }
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
