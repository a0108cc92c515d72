//! The built-in default policy, used when no `compiled-policy.json` is given.
//!
//! Per path value: inside the session sandbox dir allowed; a read inside one of the
//! server's roots allowed; a write, delete or history change inside a root (outside the
//! sandbox dir) escalated; anything outside every root denied. URL values: allowed when the
//! server's configured `allowedDomains` cover them, else denied. Other resource roles
//! (GitHub owners, repos, proxy domains): denied, no default grants them. A tool with no
//! resource-bearing argument: allowed when the server marks it read-only (`readOnlyHint`,
//! or guessed from its name), else escalated, since nothing in the call says what it touches.
//! Most restrictive wins.
//!
//! Pure: reads only the call (already canonicalised by the engine) and the policy options.

use super::domains;
use super::engine::Call;
use super::load::Annotation;
use super::model::{MostRestrictive, Role, RoleCategory, Status};
use super::{Decision, Policy};
use crate::roots::canon;

pub(crate) fn evaluate(policy: &Policy, call: &Call<'_>, ann: &Annotation) -> Decision {
    let roles = call.roles.clone();
    if roles.is_empty() {
        return if ann.read_only == Some(true) {
            Decision::new(
                Status::Allow,
                "default-read-only-tool",
                "the server marks this tool read-only and it takes no path or URL",
                Vec::new(),
            )
        } else {
            Decision::new(
                Status::Escalate,
                "default-unscoped-tool",
                "the tool may change state and no argument says what it touches: a human decides",
                Vec::new(),
            )
        };
    }
    let scope = call.ctx.scope;
    let mut combined = MostRestrictive::default();
    for role in roles.iter().copied() {
        for v in call.values(&[role]) {
            let d = match role.category() {
                RoleCategory::Path => {
                    let Some(p) = call.canonical(v) else {
                        return Decision::new(
                            Status::Deny,
                            "structural-bad-path",
                            "path was not canonicalised",
                            vec![role],
                        );
                    };
                    if scope.in_sandbox(p) {
                        Decision::new(
                            Status::Allow,
                            "default-sandbox-dir",
                            "inside the session sandbox directory",
                            vec![role],
                        )
                    } else if !call.ctx.roots.iter().any(|r| canon::is_within(p, r)) {
                        Decision::new(
                            Status::Deny,
                            "default-outside-roots",
                            format!("{} is outside the server's roots", p.display()),
                            vec![role],
                        )
                    } else if role == Role::ReadPath {
                        Decision::new(
                            Status::Allow,
                            "default-read-in-roots",
                            "reading inside the server's roots",
                            vec![role],
                        )
                    } else {
                        Decision::new(
                            Status::Escalate,
                            "default-write-in-roots",
                            format!(
                                "{role} on {} outside the session sandbox directory needs approval",
                                p.display()
                            ),
                            vec![role],
                        )
                    }
                }
                RoleCategory::Url => {
                    let d = domains::domain_for(v, role);
                    let ok = policy
                        .options
                        .server_domains
                        .get(call.ctx.server)
                        .is_some_and(|allowed| domains::matches_any(&d, allowed));
                    if ok {
                        Decision::new(
                            Status::Allow,
                            "default-allowed-domain",
                            format!("{d} is in the server's allowed domains"),
                            vec![role],
                        )
                    } else {
                        Decision::new(
                            Status::Deny,
                            "default-domain-not-allowed",
                            format!("{d} is not in the server's allowed domains"),
                            vec![role],
                        )
                    }
                }
                _ => Decision::new(
                    Status::Deny,
                    "default-deny",
                    format!("no default grants {role} values"),
                    vec![role],
                ),
            };
            if let Some(deny) = combined.add(role, d) {
                return deny;
            }
        }
    }
    match combined.finish(roles.clone()) {
        Some(d) => d,
        // Resource roles but no values (all optional and absent): the server picks its own
        // default target, so only read-only tools go through unasked.
        None if ann.read_only == Some(true) => Decision::new(
            Status::Allow,
            "default-read-only-tool",
            "no path or URL given and the tool is read-only",
            roles,
        ),
        None => Decision::new(
            Status::Escalate,
            "default-unscoped-tool",
            "no path or URL given: the server picks the target, a human decides",
            roles,
        ),
    }
}
