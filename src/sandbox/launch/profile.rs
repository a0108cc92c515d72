//! The sandbox profile a launch gets (named or matched by command) and what applying it
//! changes: environment under the user's, domains added to the allowlist, roots delivered as
//! the profile's `rootsAs` says, the state directory and extra read paths as mounts.
//!
//! Reads the profiles directory and the grants' kinds; `with_profile` creates the profile's
//! state directory (0700), the only thing it makes. Never: override a variable the user set,
//! or deliver a root that is not a grant (arguments, roots and mounts stay one set).

use std::path::{Path, PathBuf};

use super::host::{HostEnv, FALLBACK_HOME};
use super::prepared::{io, LaunchError};
use super::request::LaunchRequest;
use crate::config::NetworkConfig;
use crate::profiles;
use crate::sandbox::{Access, Mount, MountOrigin};

/// The request with a profile applied, plus what the spec needs from it.
pub(super) struct Profiled {
    pub(super) req: LaunchRequest,
    pub(super) mounts: Vec<Mount>,
    pub(super) share_pid: bool,
}

/// The profile `req` gets (named or matched) and its expansion for this launch, without
/// touching the filesystem beyond reading the profiles directory.
pub fn profile_for(
    req: &LaunchRequest,
    host: &HostEnv,
) -> Result<Option<(profiles::Selected, profiles::Plan)>, LaunchError> {
    // Only the built-ins this launch can choose are parsed (`Catalog::load_for`).
    let catalog = profiles::Catalog::load_for(
        req.profiles_dir.as_deref(),
        req.profile.as_deref(),
        &req.command,
        &req.args,
    )
    .map_err(|e| LaunchError::Invalid(e.to_string()))?;
    let selected = profiles::select(&catalog, req.profile.as_deref(), &req.command, &req.args)
        .map_err(|e| LaunchError::Invalid(format!("server `{}`: {e}", req.name)))?;
    let Some(selected) = selected else {
        return Ok(None);
    };
    let sandbox_home = req
        .env
        .get("HOME")
        .map(PathBuf::from)
        .or_else(|| host.home.clone())
        .unwrap_or_else(|| PathBuf::from(FALLBACK_HOME));
    let state_dir = state_dir_for(req, host.home.as_deref());
    let needs_state = selected.profile.state.is_some();
    let state_dir = match state_dir {
        Some(d) => d,
        None if needs_state => {
            return Err(LaunchError::Invalid(format!(
                "server `{}`: profile {} keeps state but there is no HOME for the default state directory; set palisade.stateDir (or --state-dir)",
                req.name, selected.profile.name
            )))
        }
        // Not used: the profile has no state.
        None => PathBuf::new(),
    };
    let plan = profiles::plan(
        &selected.profile,
        &profiles::Context {
            host_home: host.home.as_deref(),
            sandbox_home: &sandbox_home,
            state_dir: &state_dir,
        },
    );
    Ok(Some((selected, plan)))
}

/// `<state_root>/<name>`: the private state directory of server `name` (not created here).
pub fn state_dir_for(req: &LaunchRequest, host_home: Option<&Path>) -> Option<PathBuf> {
    let root = req
        .state_root
        .clone()
        .or_else(|| host_home.map(|h| h.join(".local/state/palisade/servers")))?;
    // Server names from a config are already safe; `run` names come from a file name.
    let safe: String = req
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let safe = if safe.is_empty() || safe.chars().all(|c| c == '.') {
        "server".to_string()
    } else {
        safe
    };
    Some(root.join(safe))
}

/// Applies an expanded profile: env under the user's, domains into the allowlist, the state
/// directory created (0700) and mounted read-write, existing read paths mounted read-only.
pub(super) fn with_profile(
    req: &LaunchRequest,
    selected: &profiles::Selected,
    plan: &profiles::Plan,
) -> Result<Profiled, LaunchError> {
    tracing::info!(server = %req.name, profile = %selected.profile.name, why = %selected.why, "sandbox profile");
    let mut out = req.clone();
    for (k, v) in &plan.env {
        out.env.entry(k.clone()).or_insert_with(|| v.clone());
    }
    if let Some(roots_as) = &selected.profile.roots_as {
        let delivery = deliver_roots(req, roots_as);
        tracing::debug!(server = %req.name, args = ?delivery.args, env = ?delivery.env, "roots delivered per the profile's rootsAs");
        out.args.extend(delivery.args);
        for (k, v) in delivery.env {
            out.env.entry(k).or_insert(v);
        }
    }
    if !plan.domains.is_empty() {
        let mut lists = match &req.network {
            NetworkConfig::Allowlist(l) => l.clone(),
            NetworkConfig::None => Default::default(),
        };
        for d in &plan.domains {
            if !lists.allowed_domains.contains(d) {
                lists.allowed_domains.push(d.clone());
            }
        }
        out.network = NetworkConfig::Allowlist(lists);
    }
    let mut mounts = Vec::new();
    if let Some(dir) = &plan.state_dir {
        crate::private_dir::create(dir).map_err(|e| {
            io(
                &format!("cannot create state directory {}", dir.display()),
                e,
            )
        })?;
        let real = std::fs::canonicalize(dir)
            .map_err(|e| io(&format!("cannot canonicalise {}", dir.display()), e))?;
        mounts.push(Mount {
            path: real,
            access: Access::Rw,
            origin: MountOrigin::State,
        });
    }
    for p in &plan.read {
        match std::fs::canonicalize(p) {
            Ok(real) if real != Path::new("/") => mounts.push(Mount {
                path: real,
                access: Access::Ro,
                origin: MountOrigin::Profile,
            }),
            _ => {
                tracing::debug!(server = %req.name, path = %p.display(), "profile read path absent; skipped")
            }
        }
    }
    Ok(Profiled {
        req: out,
        mounts,
        share_pid: plan.share_pid,
    })
}

/// The request's grants as a profile's `rootsAs` delivers them: the directories among them
/// (a file grant is not a root), in grant order, the session sandbox dir last. The grants
/// are exactly what the sandbox mounts and, under the gateway, what `roots/list` announces,
/// so arguments, roots and mounts stay one set (a relaunch after a widening re-delivers).
fn deliver_roots(
    req: &LaunchRequest,
    roots_as: &profiles::RootsAs,
) -> profiles::apply::RootsDelivery {
    let is_session = |p: &Path| req.session_dir.as_deref() == Some(p);
    let own: Vec<PathBuf> = req
        .grants
        .iter()
        .filter(|g| !is_session(&g.path) && g.path.is_dir())
        .map(|g| g.path.clone())
        .fold(Vec::new(), |mut acc, p| {
            if !acc.contains(&p) {
                acc.push(p);
            }
            acc
        });
    let session = req
        .session_dir
        .as_deref()
        .filter(|s| req.grants.iter().any(|g| g.path == *s) && s.is_dir());
    profiles::apply::roots_delivery(
        roots_as,
        profiles::apply::DeliveryRoots { own: &own, session },
        &req.args,
    )
}

#[cfg(test)]
mod tests {
    use super::super::request::Grant;
    use super::*;

    fn selected(name: &str) -> (profiles::Selected, profiles::Plan) {
        let catalog = profiles::Catalog::load(None).unwrap();
        let selected = profiles::select(&catalog, Some(name), "x", &[])
            .unwrap()
            .unwrap();
        let plan = profiles::plan(
            &selected.profile,
            &profiles::Context {
                host_home: None,
                sandbox_home: Path::new("/home/sandbox"),
                state_dir: Path::new("/nonexistent-state"),
            },
        );
        (selected, plan)
    }

    fn grant(path: &Path, access: Access) -> Grant {
        Grant {
            path: path.to_path_buf(),
            access,
        }
    }

    #[test]
    fn roots_as_appends_the_grant_directories_with_the_session_dir_last() {
        let t = tempfile::tempdir().unwrap();
        let (session, a, b) = (t.path().join("s"), t.path().join("a"), t.path().join("b"));
        for d in [&session, &a, &b] {
            std::fs::create_dir(d).unwrap();
        }
        let file = t.path().join("f.txt");
        std::fs::write(&file, "x").unwrap();
        let req = LaunchRequest {
            name: "fs".into(),
            command: "node".into(),
            args: vec!["index.js".into(), b.display().to_string()],
            grants: vec![
                grant(&session, Access::Rw),
                grant(&a, Access::Rw),
                grant(&file, Access::Ro),
                grant(&b, Access::Ro),
            ],
            session_dir: Some(session.clone()),
            ..LaunchRequest::default()
        };
        let (sel, plan) = selected("server-filesystem");
        let out = with_profile(&req, &sel, &plan).unwrap().req;
        let shown = |p: &Path| p.display().to_string();
        assert_eq!(
            out.args,
            [
                "index.js".to_string(),
                shown(&b),
                shown(&a),
                shown(&session)
            ],
            "a file grant is not a root; a root the user already passed is not repeated"
        );
    }

    #[test]
    fn roots_as_only_first_skips_the_session_dir_and_keeps_the_users_flag() {
        let t = tempfile::tempdir().unwrap();
        let (session, repo) = (t.path().join("s"), t.path().join("repo"));
        for d in [&session, &repo] {
            std::fs::create_dir(d).unwrap();
        }
        let mut req = LaunchRequest {
            name: "git".into(),
            command: "mcp-server-git".into(),
            grants: vec![grant(&session, Access::Rw), grant(&repo, Access::Rw)],
            session_dir: Some(session.clone()),
            ..LaunchRequest::default()
        };
        let (sel, plan) = selected("mcp-server-git");
        let out = with_profile(&req, &sel, &plan).unwrap().req;
        assert_eq!(
            out.args,
            ["--repository".to_string(), repo.display().to_string()]
        );
        req.grants.truncate(1);
        let out = with_profile(&req, &sel, &plan).unwrap().req;
        assert!(
            out.args.is_empty(),
            "the session dir alone is no repository: {:?}",
            out.args
        );
    }

    #[test]
    fn no_roots_as_no_arguments() {
        let t = tempfile::tempdir().unwrap();
        let req = LaunchRequest {
            name: "time".into(),
            command: "mcp-server-time".into(),
            grants: vec![grant(t.path(), Access::Rw)],
            ..LaunchRequest::default()
        };
        let (sel, plan) = selected("mcp-server-time");
        assert!(with_profile(&req, &sel, &plan).unwrap().req.args.is_empty());
    }
}
