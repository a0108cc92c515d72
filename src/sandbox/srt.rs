//! `backend: srt`: the same `SandboxSpec` rendered for Anthropic's sandbox-runtime instead of
//! palisade's own bubblewrap argv. `settings` (pure) turns the spec plus the server's domain
//! lists into srt's settings JSON; `command_line` (pure) quotes the command for `srt -c`;
//! `prepare` (the only I/O: one private temporary file) builds the `srt -s FILE -c CMD`
//! command.
//!
//! What srt grants that the native backend does not (see docs/security.md): reads are open
//! everywhere except `denyRead` (srt binds `/` read-only), the environment is not cleared
//! (srt adds its proxy variables to whatever it was started with; palisade starts it with the
//! spec's environment only), `/sys` is visible, IPC and UTS are shared, and no palisade
//! seccomp filter or resource limits apply inside. Never: render a writable path that is not
//! a read-write grant of the spec.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::capabilities::Capabilities;
use super::launch::{Enforcement, LaunchError, LaunchRequest, Prepared};
use super::spec::{Access, MountOrigin, SandboxSpec};
use crate::config::{DomainLists, NetworkConfig};

/// Credentials and secrets that every srt sandbox hides, relative to HOME (srt reads are open
/// by default, so these must be named).
pub const SENSITIVE_HOME: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gcloud",
    ".azure",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".config/gh",
    ".local/state/palisade",
];

/// System files with secrets.
pub const SENSITIVE_SYSTEM: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
];

/// srt's settings for `spec`: `filesystem.allowWrite` = the spec's read-write grants,
/// `denyRead` = the sensitive defaults (under `home`, the host user's real HOME, since srt
/// shows the real filesystem) plus the spec's deny list, `denyWrite` as configured,
/// `network` = the lists (empty allowlist: no network).
pub fn settings(
    spec: &SandboxSpec,
    network: &NetworkConfig,
    deny_write: &[PathBuf],
    home: Option<&Path>,
) -> Value {
    let allow_write: BTreeSet<String> = spec
        .mounts
        .iter()
        .filter(|m| m.access == Access::Rw && m.origin != MountOrigin::SystemBase)
        .map(|m| m.path.display().to_string())
        .collect();
    let mut deny_read: BTreeSet<String> = SENSITIVE_SYSTEM.iter().map(|s| s.to_string()).collect();
    if let Some(h) = home {
        deny_read.extend(
            SENSITIVE_HOME
                .iter()
                .map(|s| h.join(s).display().to_string()),
        );
    }
    deny_read.extend(spec.deny.iter().map(|p| p.display().to_string()));
    // A grant (or the command's runtime) inside a default wins over the default: drop
    // defaults that contain one. Configured denyRead entries always stay.
    let visible: Vec<&Path> = spec
        .mounts
        .iter()
        .filter(|m| m.origin != MountOrigin::SystemBase)
        .map(|m| m.path.as_path())
        .collect();
    deny_read.retain(|d| {
        spec.deny.iter().any(|x| x == Path::new(d)) || !visible.iter().any(|v| v.starts_with(d))
    });
    let deny_write: BTreeSet<String> = deny_write.iter().map(|p| p.display().to_string()).collect();
    let empty = DomainLists::default();
    let lists = match network {
        NetworkConfig::Allowlist(l) => l,
        NetworkConfig::None => &empty,
    };
    json!({
        "network": {
            "allowedDomains": lists.allowed_domains,
            "deniedDomains": lists.denied_domains,
        },
        "filesystem": {
            "denyRead": deny_read,
            "allowWrite": allow_write,
            "denyWrite": deny_write,
        },
    })
}

/// The command as one shell-words string for `srt -c`.
pub fn command_line(spec: &SandboxSpec) -> String {
    let mut words = vec![spec.program.display().to_string()];
    words.extend(spec.args.iter().cloned());
    shell_words::join(words)
}

/// The `srt -s FILE -c CMD` command for `spec`; the settings file is private (0600, in the
/// system temp dir) and removed when the returned `Prepared` is dropped.
pub(crate) fn prepare(
    spec: &SandboxSpec,
    req: &LaunchRequest,
    caps: &Capabilities,
    enforcement: Enforcement,
) -> Result<Prepared, LaunchError> {
    let Some(srt) = &caps.srt else {
        // resolve only plans srt when it was found; fail closed if that ever changes.
        return Err(LaunchError::Refused {
            name: req.name.clone(),
            reasons: vec!["srt is not available".into()],
        });
    };
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let body = settings(spec, &req.network, &req.deny_write, home.as_deref());
    let io = |what: &str, e: std::io::Error| LaunchError::Io {
        context: format!("cannot write srt settings ({what})"),
        cause: e,
    };
    let mut file = tempfile::Builder::new()
        .prefix("palisade-srt-")
        .suffix(".json")
        .tempfile()
        .map_err(|e| io("create", e))?;
    file.write_all(body.to_string().as_bytes())
        .map_err(|e| io("write", e))?;
    let path = file.into_temp_path();
    let args: Vec<OsString> = vec![
        "-s".into(),
        path.to_path_buf().into(),
        "-c".into(),
        command_line(spec).into(),
    ];
    let mut cmd = std::process::Command::new(srt);
    cmd.args(&args).env_clear().envs(&spec.env);
    // srt runs under node, which must be found on the spec's PATH; the command runs in cwd.
    cmd.current_dir(&spec.cwd);
    let mut argv = vec![srt.as_os_str().to_os_string()];
    argv.extend(args);
    Ok(Prepared::new_with_files(
        tokio::process::Command::from(cmd),
        enforcement,
        argv,
        vec![path],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::spec::{Mount, NetworkSpec, ResourceLimits};
    use std::collections::BTreeMap;

    fn spec() -> SandboxSpec {
        let m = |p: &str, access, origin| Mount {
            path: p.into(),
            access,
            origin,
        };
        SandboxSpec {
            program: "/usr/bin/python3".into(),
            args: vec!["-m".into(), "mcp_server_fetch".into(), "it's".into()],
            env: BTreeMap::new(),
            cwd: "/work/proj".into(),
            mounts: vec![
                m("/usr", Access::Ro, MountOrigin::SystemBase),
                m("/opt/venv", Access::Ro, MountOrigin::Runtime),
                m("/work/sandbox", Access::Rw, MountOrigin::Root),
                m("/work/proj", Access::Rw, MountOrigin::Root),
                m("/work/docs", Access::Ro, MountOrigin::Root),
            ],
            links: vec![],
            deny: vec!["/work/proj/.env".into()],
            home: "/home/u".into(),
            network: NetworkSpec::None,
            limits: ResourceLimits::default(),
            share_pid: false,
            seccomp: true,
        }
    }

    #[test]
    fn golden_settings() {
        let net = NetworkConfig::Allowlist(DomainLists {
            allowed_domains: vec!["example.com".into(), "*.github.com".into()],
            denied_domains: vec!["evil.example.com".into()],
        });
        let got = settings(
            &spec(),
            &net,
            &["/work/proj/.git".into()],
            Some(Path::new("/home/u")),
        );
        let want = json!({
            "network": {
                "allowedDomains": ["example.com", "*.github.com"],
                "deniedDomains": ["evil.example.com"]
            },
            "filesystem": {
                "denyRead": [
                    "/etc/gshadow", "/etc/shadow", "/etc/ssh", "/etc/sudoers", "/etc/sudoers.d",
                    "/home/u/.aws", "/home/u/.azure", "/home/u/.config/gcloud", "/home/u/.config/gh",
                    "/home/u/.docker", "/home/u/.git-credentials", "/home/u/.gnupg", "/home/u/.kube",
                    "/home/u/.local/state/palisade", "/home/u/.netrc", "/home/u/.npmrc",
                    "/home/u/.pypirc", "/home/u/.ssh", "/work/proj/.env"
                ],
                "allowWrite": ["/work/proj", "/work/sandbox"],
                "denyWrite": ["/work/proj/.git"]
            }
        });
        assert_eq!(got, want);
    }

    #[test]
    fn no_network_is_an_empty_allowlist_and_required_keys_are_present() {
        let got = settings(&spec(), &NetworkConfig::None, &[], None);
        assert_eq!(got["network"]["allowedDomains"], json!([]));
        assert_eq!(got["network"]["deniedDomains"], json!([]));
        for k in ["denyRead", "allowWrite", "denyWrite"] {
            assert!(got["filesystem"][k].is_array(), "{k}");
        }
    }

    #[test]
    fn a_default_deny_over_a_write_grant_yields_to_the_grant() {
        let mut s = spec();
        s.mounts.push(Mount {
            path: "/home/u/.ssh/keys".into(),
            access: Access::Rw,
            origin: MountOrigin::Root,
        });
        let got = settings(&s, &NetworkConfig::None, &[], Some(Path::new("/home/u")));
        let deny: Vec<&str> = got["filesystem"]["denyRead"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(!deny.contains(&"/home/u/.ssh"), "{deny:?}");
        assert!(deny.contains(&"/etc/shadow"));
    }

    #[test]
    fn the_command_is_shell_quoted() {
        assert_eq!(
            command_line(&spec()),
            r#"/usr/bin/python3 -m mcp_server_fetch 'it'\''s'"#
        );
    }
}
