//! A call as the rules see it once the structural steps are done: each argument's roles
//! (conditional roles resolved), the tool's resource roles in evaluation order, and the
//! canonical form of every path value. Built by `evaluate`; read by `rules` and the built-in
//! default policy. Pure: no filesystem access (the paths were canonicalised before).

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use super::args::push_strings;
use crate::policy::model::Role;
use crate::policy::CallContext;

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

    pub(super) fn tool_has_any_role(&self, roles: &[Role]) -> bool {
        self.args
            .iter()
            .map(|(_, rs)| rs.as_ref())
            .chain(self.inferred.iter().map(|(_, rs)| rs.as_slice()))
            .any(|rs| rs.iter().any(|r| roles.contains(r)))
    }
}

pub(super) fn resource_roles(
    args: &[(&str, Cow<'_, [Role]>)],
    inferred: &[(&str, Vec<Role>)],
) -> Vec<Role> {
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
