//! A profile turned into concrete additions for one launch: read-only paths, the state
//! directory, env, network domains, relaxations; and how a root set becomes arguments.
//! Pure: paths are expanded but not checked (the launcher checks and skips what is absent).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Only, Profile, ProfileNetwork, RootsAs};

/// What the expansion needs to know about this launch.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    /// The user's home on the host (for `~/` in `read`).
    pub host_home: Option<&'a Path>,
    /// HOME inside the sandbox (for `${HOME}` in `env`).
    pub sandbox_home: &'a Path,
    /// This server's private state directory (used only when the profile has `state`).
    pub state_dir: &'a Path,
}

/// The additions a profile makes to one launch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Extra read-only paths (absolute; may not exist on this machine).
    pub read: Vec<PathBuf>,
    /// The private read-write state directory, when the profile keeps state.
    pub state_dir: Option<PathBuf>,
    /// Environment to set unless the user's config sets the same name.
    pub env: BTreeMap<String, String>,
    /// Domains the server needs, added to the user's allowlist.
    pub domains: Vec<String>,
    /// Keep the host PID namespace.
    pub share_pid: bool,
}

/// Expands `profile` for one launch.
pub fn plan(profile: &Profile, ctx: &Context<'_>) -> Plan {
    let read = profile
        .read
        .iter()
        .filter_map(|r| match r.strip_prefix("~/") {
            // No home on the host: a `~/` path cannot exist, so it grants nothing.
            Some(rest) => ctx.host_home.map(|h| h.join(rest)),
            None => Some(PathBuf::from(r)),
        })
        .collect();
    let state_dir = profile.state.as_ref().map(|_| ctx.state_dir.to_path_buf());
    let env = profile
        .env
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace("${STATE_DIR}", &ctx.state_dir.display().to_string())
                .replace("${HOME}", &ctx.sandbox_home.display().to_string());
            (k.clone(), v)
        })
        .collect();
    let domains = match &profile.network {
        ProfileNetwork::None => Vec::new(),
        ProfileNetwork::Domains {
            allowed_domains, ..
        } => allowed_domains.clone(),
    };
    Plan {
        read,
        state_dir,
        env,
        domains,
        share_pid: profile.relax.share_pid.is_some(),
    }
}

/// Roots delivered on the command line or in the environment, per the profile's `rootsAs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RootsDelivery {
    /// Arguments to append to the server's own.
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
}

/// A server's roots as `rootsAs` sees them.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryRoots<'a> {
    /// The server's own roots, most important first: policy roots, config grants, roots
    /// added by approved escalations.
    pub own: &'a [PathBuf],
    /// The session sandbox dir, when the server has one: every server's scratch space, so it
    /// comes after the server's own roots and is never the one root a single-root server is
    /// confined to (`only: first`).
    pub session: Option<&'a Path>,
}

/// How `roots` reach a server with `roots_as`. Roots already among `existing_args` (the
/// user wrote them, or a `{roots}` placeholder expanded them) are not repeated; a flag the
/// user already gave with `only: first` keeps the user's value as the only one; an env
/// variable is set whole (the caller lets the user's own value win).
pub fn roots_delivery(
    roots_as: &RootsAs,
    roots: DeliveryRoots<'_>,
    existing_args: &[String],
) -> RootsDelivery {
    let show = |r: &Path| r.display().to_string();
    let all: Vec<String> = roots
        .own
        .iter()
        .map(|r| show(r))
        .chain(roots.session.map(show))
        .collect();
    let mut out = RootsDelivery::default();
    match roots_as {
        RootsAs::Args(_) => {
            for r in all {
                if !existing_args.contains(&r) && !out.args.contains(&r) {
                    out.args.push(r);
                }
            }
        }
        RootsAs::Flag(f) => {
            let chosen: Vec<String> = if f.only == Some(Only::First) {
                if existing_args.contains(&f.flag) {
                    return out;
                }
                roots.own.first().map(|r| show(r)).into_iter().collect()
            } else {
                all
            };
            for r in chosen {
                let already = existing_args
                    .windows(2)
                    .chain(out.args.windows(2))
                    .any(|w| w[0] == f.flag && w[1] == r);
                if !already {
                    out.args.push(f.flag.clone());
                    out.args.push(r);
                }
            }
        }
        RootsAs::Env(e) => {
            if !all.is_empty() {
                out.env.insert(e.env.clone(), all.join(&e.separator));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profiles::catalog::parse;

    #[test]
    fn state_env_and_home_are_expanded() {
        let p = parse(
            "m",
            r#"{"description": "d", "state": {"reason": "r"}, "read": ["~/.cache/x", "/opt/y"],
                "env": {"F": "${STATE_DIR}/f.json", "H": "${HOME}/h"},
                "relax": {"sharePid": "chromium"},
                "network": {"allowedDomains": ["api.example.com"], "reason": "api"}}"#,
            "m.json",
        )
        .unwrap();
        let got = plan(
            &p,
            &Context {
                host_home: Some(Path::new("/home/u")),
                sandbox_home: Path::new("/home/u"),
                state_dir: Path::new("/s/m"),
            },
        );
        assert_eq!(
            got.read,
            [PathBuf::from("/home/u/.cache/x"), PathBuf::from("/opt/y")]
        );
        assert_eq!(got.state_dir, Some(PathBuf::from("/s/m")));
        assert_eq!(got.env["F"], "/s/m/f.json");
        assert_eq!(got.env["H"], "/home/u/h");
        assert_eq!(got.domains, ["api.example.com"]);
        assert!(got.share_pid);
    }

    #[test]
    fn a_profile_without_state_gets_no_state_dir_and_no_relaxation() {
        let p = parse("t", r#"{"description": "d", "read": ["~/.x"]}"#, "t.json").unwrap();
        let got = plan(
            &p,
            &Context {
                host_home: None,
                sandbox_home: Path::new("/home/sandbox"),
                state_dir: Path::new("/s/t"),
            },
        );
        assert_eq!(got, Plan::default());
    }

    #[test]
    fn roots_become_args_flags_or_env() {
        let own = [PathBuf::from("/a"), PathBuf::from("/b c")];
        let roots = DeliveryRoots {
            own: &own,
            session: Some(Path::new("/sb")),
        };
        let rs = |t: &str| -> RootsAs { serde_json::from_str(t).unwrap() };
        let d = roots_delivery(&rs(r#"{"args": "append"}"#), roots, &["/a".into()]);
        assert_eq!(
            d.args,
            ["/b c", "/sb"],
            "own roots first, the session dir last"
        );
        let d = roots_delivery(&rs(r#"{"flag": "--root"}"#), roots, &[]);
        assert_eq!(d.args, ["--root", "/a", "--root", "/b c", "--root", "/sb"]);
        let d = roots_delivery(
            &rs(r#"{"flag": "--root"}"#),
            roots,
            &["--root".into(), "/b c".into()],
        );
        assert_eq!(d.args, ["--root", "/a", "--root", "/sb"]);
        let d = roots_delivery(
            &rs(r#"{"flag": "--repository", "only": "first"}"#),
            roots,
            &[],
        );
        assert_eq!(d.args, ["--repository", "/a"]);
        let d = roots_delivery(
            &rs(r#"{"flag": "--repository", "only": "first"}"#),
            roots,
            &["--repository".into(), "/z".into()],
        );
        assert!(
            d.args.is_empty(),
            "the user's own --repository stays the only one"
        );
        let d = roots_delivery(&rs(r#"{"env": "DIRS", "separator": ":"}"#), roots, &[]);
        assert_eq!(d.env["DIRS"], "/a:/b c:/sb");
    }

    #[test]
    fn the_session_dir_alone_is_never_the_only_root() {
        let rs = |t: &str| -> RootsAs { serde_json::from_str(t).unwrap() };
        let roots = DeliveryRoots {
            own: &[],
            session: Some(Path::new("/sb")),
        };
        let d = roots_delivery(
            &rs(r#"{"flag": "--repository", "only": "first"}"#),
            roots,
            &[],
        );
        assert_eq!(d, RootsDelivery::default());
        let d = roots_delivery(&rs(r#"{"args": "append"}"#), roots, &[]);
        assert_eq!(d.args, ["/sb"]);
        let none = DeliveryRoots {
            own: &[],
            session: None,
        };
        let d = roots_delivery(&rs(r#"{"env": "DIRS", "separator": ":"}"#), none, &[]);
        assert!(d.env.is_empty(), "no roots: the variable is not set at all");
    }
}
