//! Step 7 for a compiled policy: the resource roles the sandbox did not resolve go through
//! the rule chain, role by role. Each value is discharged by the first rule that matches it,
//! an undischarged value denies, and the most restrictive result across roles wins (deny >
//! escalate > allow). A call with no resource role is decided by the first rule that matches.
//! Pure: reads the `Call` built by `evaluate`; never allows when no rule covers a value.

use super::call::Call;
use super::{DEFAULT_DENY, SANDBOX_ALLOW};
use crate::policy::domains;
use crate::policy::load::Rule;
use crate::policy::model::{ListType, MostRestrictive, Role, RoleCategory, Status};
use crate::policy::{Decision, Policy};
use crate::roots::canon;

pub(super) fn compiled(policy: &Policy, call: &Call<'_>, resolved: &[Role]) -> Decision {
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
