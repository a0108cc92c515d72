//! Facts from palisade's own environment (`HostEnv`: PATH, HOME, LANG and nothing else) and
//! the sandboxed command's whole environment built from them and the request (`sandbox_env`).
//!
//! `HostEnv::current` is the only read of the process environment; `sandbox_env` is pure.
//! Never: pass any other variable of palisade's through (the child's environment starts
//! empty).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::prepared::LaunchError;
use super::request::LaunchRequest;

/// What palisade takes from its own environment (and nothing else).
pub struct HostEnv {
    pub(super) path: String,
    pub(super) home: Option<PathBuf>,
    pub(super) lang: Option<String>,
}

impl HostEnv {
    pub fn current() -> Self {
        HostEnv {
            path: std::env::var("PATH")
                .ok()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| DEFAULT_PATH.to_string()),
            home: std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|h| h.is_absolute() && h != Path::new("/")),
            lang: std::env::var("LANG").ok().filter(|l| !l.is_empty()),
        }
    }
}

const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";
/// HOME inside the sandbox when palisade has none of its own.
pub(super) const FALLBACK_HOME: &str = "/home/sandbox";

/// The sandbox's whole environment: PATH, HOME, TMPDIR, LANG, then the request's env.
pub(super) fn sandbox_env(
    req: &LaunchRequest,
    host: &HostEnv,
) -> Result<BTreeMap<String, String>, LaunchError> {
    let mut env = BTreeMap::new();
    env.insert("PATH".to_string(), host.path.clone());
    let home = host
        .home
        .clone()
        .unwrap_or_else(|| PathBuf::from(FALLBACK_HOME));
    env.insert("HOME".to_string(), home.display().to_string());
    env.insert("TMPDIR".to_string(), "/tmp".to_string());
    env.insert(
        "LANG".to_string(),
        host.lang.clone().unwrap_or_else(|| "C.UTF-8".into()),
    );
    for (k, v) in &req.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(LaunchError::Invalid(format!(
                "invalid environment variable name `{k}`: names are non-empty and have no `=`"
            )));
        }
        env.insert(k.clone(), v.clone());
    }
    if !Path::new(&env["HOME"]).is_absolute() {
        return Err(LaunchError::Invalid(format!(
            "HOME={} is not an absolute path; give an absolute HOME or leave it unset",
            env["HOME"]
        )));
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> HostEnv {
        HostEnv {
            path: "/usr/bin:/bin".into(),
            home: None,
            lang: None,
        }
    }

    #[test]
    fn the_environment_is_four_variables_then_the_requests() {
        let mut req = LaunchRequest::default();
        req.env.insert("API_KEY".into(), "k".into());
        let env = sandbox_env(&req, &host()).unwrap();
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(keys, ["API_KEY", "HOME", "LANG", "PATH", "TMPDIR"]);
        assert_eq!(env["HOME"], FALLBACK_HOME);
        assert_eq!(env["LANG"], "C.UTF-8");
        assert_eq!(env["TMPDIR"], "/tmp");
    }

    #[test]
    fn a_bad_variable_name_or_a_relative_home_is_refused() {
        for (k, v) in [("A=B", "x"), ("", "x"), ("HOME", "relative/home")] {
            let mut req = LaunchRequest::default();
            req.env.insert(k.into(), v.into());
            assert!(
                matches!(sandbox_env(&req, &host()), Err(LaunchError::Invalid(_))),
                "{k}={v} must be refused"
            );
        }
    }
}
