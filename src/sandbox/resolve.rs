//! Enforce or warn, decided per server: (machine capabilities, what the server needs, the
//! sandbox policy) -> sandboxed, degraded with reasons, or refused with reasons. Pure: the
//! same inputs always give the same answer, and every reason names its fix (a package, a
//! sysctl, an AppArmor profile, a configuration change).
//!
//! Gaps come in two kinds. A *hard* gap means bubblewrap cannot run at all (missing, too old,
//! no user namespaces): warn mode then runs the command directly. A *soft* gap means the
//! sandbox runs with less than was asked (no seccomp, network wider than configured, a
//! backend not available): warn mode runs it in the weaker sandbox. Enforce refuses both.

use std::fmt;

use serde::Serialize;

use super::capabilities::{Capabilities, Userns};
use crate::config::{Backend, SandboxPolicy};

/// What a server asks of its sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needs {
    /// `false` when the user opted the server out (`"sandbox": false`).
    pub sandboxed: bool,
    pub backend: Backend,
    /// It needs outbound HTTP(S) to an allowlist (the egress proxy).
    pub egress: bool,
}

/// One gap: what is missing and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reason {
    pub problem: String,
    pub fix: String,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (fix: {})", self.problem, self.fix)
    }
}

fn reason(problem: impl Into<String>, fix: impl Into<String>) -> Reason {
    Reason {
        problem: problem.into(),
        fix: fix.into(),
    }
}

/// How the command will actually be run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Under bubblewrap (`false`: directly, warn mode only).
    pub bwrap: bool,
    pub seccomp: bool,
    /// Share the host network (only ever a warn-mode degradation).
    pub host_network: bool,
}

/// The decision for one server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "status")]
pub enum Resolution {
    Sandboxed { plan: Plan },
    Degraded { plan: Plan, reasons: Vec<Reason> },
    Refused { reasons: Vec<Reason> },
    OptedOut,
}

const INSTALL_BWRAP: &str =
    "install bubblewrap 0.8 or later (Debian/Ubuntu: apt install bubblewrap; Fedora: dnf install bubblewrap)";

/// Why user namespaces are unusable, from the static signals, with the fix.
fn userns_gap(caps: &Capabilities) -> Option<Reason> {
    let restricted_apparmor = caps.apparmor_restrict_userns == Some(true) && !caps.root;
    let static_gap = if restricted_apparmor {
        Some(reason(
            "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)",
            "give bwrap an AppArmor profile that allows them: write /etc/apparmor.d/bwrap with \
             `abi <abi/4.0>, include <tunables/global> profile bwrap /usr/bin/bwrap flags=(unconfined) { userns, }` \
             and run `apparmor_parser -r /etc/apparmor.d/bwrap`, or `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`",
        ))
    } else if caps.max_user_namespaces == Some(0) {
        Some(reason(
            "user namespaces are disabled (user.max_user_namespaces=0)",
            "sysctl -w user.max_user_namespaces=15000 (persist it in /etc/sysctl.d/)",
        ))
    } else if caps.unprivileged_userns_clone == Some(false) && !caps.root {
        Some(reason(
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0)",
            "sysctl -w kernel.unprivileged_userns_clone=1 (persist it in /etc/sysctl.d/)",
        ))
    } else {
        None
    };
    match &caps.userns {
        Userns::Usable => None,
        Userns::NotProbed => static_gap,
        Userns::Unusable { error } => Some(static_gap.map_or_else(
            || {
                reason(
                    format!("bubblewrap cannot create its namespaces: {error}"),
                    "enable user namespaces (kernel CONFIG_USER_NS, sysctl user.max_user_namespaces > 0), \
                     or run `palisade check` for details",
                )
            },
            |r| reason(format!("{} ({error})", r.problem), r.fix),
        )),
    }
}

/// Gaps that make bubblewrap unusable.
fn hard_gaps(caps: &Capabilities) -> Vec<Reason> {
    let Some(b) = &caps.bwrap else {
        return vec![match &caps.bwrap_override_problem {
            Some(problem) => reason(
                problem.clone(),
                "unset PALISADE_BWRAP, or point it at a working bwrap",
            ),
            None => reason(
                "bubblewrap (bwrap) is not installed or not in PATH",
                INSTALL_BWRAP,
            ),
        }];
    };
    let mut gaps = Vec::new();
    if !b.disable_userns {
        gaps.push(reason(
            format!(
                "bubblewrap {} is too old: it lacks --disable-userns, which stops nested user namespaces",
                b.version.as_deref().unwrap_or("(unknown version)")
            ),
            INSTALL_BWRAP,
        ));
    }
    gaps.extend(userns_gap(caps));
    gaps
}

/// Gaps that leave a weaker sandbox.
fn soft_gaps(caps: &Capabilities, needs: &Needs, plan: &mut Plan) -> Vec<Reason> {
    let mut gaps = Vec::new();
    if !caps.seccomp {
        plan.seccomp = false;
        gaps.push(reason(
            "the kernel has no seccomp filter support: AF_VSOCK, io_uring and keyring calls stay open",
            "use a kernel built with CONFIG_SECCOMP_FILTER",
        ));
    }
    if needs.egress {
        plan.host_network = true;
        gaps.push(reason(
            "domain allowlists are not supported yet (the egress proxy is a later issue): the server would get the host network",
            "remove `network` from the server's sandbox config (loopback only), or use sandbox policy warn to run it with the host network",
        ));
    }
    if needs.backend == Backend::Srt {
        gaps.push(reason(
            "the srt backend is not supported yet; palisade's own bubblewrap sandbox (stricter: closed reads, cleared environment, seccomp) would run instead",
            "set backend to bwrap",
        ));
    }
    gaps
}

/// Decides how to run a server.
pub fn resolve(caps: &Capabilities, needs: &Needs, policy: SandboxPolicy) -> Resolution {
    if !needs.sandboxed {
        return Resolution::OptedOut;
    }
    let mut plan = Plan {
        bwrap: true,
        seccomp: true,
        host_network: false,
    };
    let hard = hard_gaps(caps);
    let soft = soft_gaps(caps, needs, &mut plan);
    if hard.is_empty() && soft.is_empty() {
        return Resolution::Sandboxed { plan };
    }
    let broken = !hard.is_empty();
    let reasons: Vec<Reason> = hard.into_iter().chain(soft).collect();
    match policy {
        SandboxPolicy::Enforce => Resolution::Refused { reasons },
        SandboxPolicy::Warn if broken => Resolution::Degraded {
            plan: Plan {
                bwrap: false,
                seccomp: false,
                host_network: true,
            },
            reasons,
        },
        SandboxPolicy::Warn => Resolution::Degraded { plan, reasons },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::capabilities::BwrapInfo;

    fn good() -> Capabilities {
        Capabilities {
            bwrap: Some(BwrapInfo {
                path: "/usr/bin/bwrap".into(),
                version: Some("0.8.0".into()),
                disable_userns: true,
            }),
            bwrap_override_problem: None,
            userns: Userns::Usable,
            max_user_namespaces: Some(1000),
            unprivileged_userns_clone: None,
            apparmor_restrict_userns: None,
            root: false,
            seccomp: true,
            socat: Some("/usr/bin/socat".into()),
            srt: None,
        }
    }

    fn needs() -> Needs {
        Needs {
            sandboxed: true,
            backend: Backend::Bwrap,
            egress: false,
        }
    }

    const FULL: Plan = Plan {
        bwrap: true,
        seccomp: true,
        host_network: false,
    };
    const DIRECT: Plan = Plan {
        bwrap: false,
        seccomp: false,
        host_network: true,
    };

    fn reasons(r: &Resolution) -> String {
        match r {
            Resolution::Degraded { reasons, .. } | Resolution::Refused { reasons } => reasons
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    }

    #[test]
    fn a_capable_machine_sandboxes_under_both_policies() {
        for p in [SandboxPolicy::Enforce, SandboxPolicy::Warn] {
            assert_eq!(
                resolve(&good(), &needs(), p),
                Resolution::Sandboxed { plan: FULL }
            );
        }
    }

    #[test]
    fn opted_out_is_opted_out_whatever_the_machine() {
        let mut caps = good();
        caps.bwrap = None;
        let n = Needs {
            sandboxed: false,
            ..needs()
        };
        assert_eq!(
            resolve(&caps, &n, SandboxPolicy::Enforce),
            Resolution::OptedOut
        );
    }

    #[test]
    fn missing_bwrap_refuses_in_enforce_and_runs_directly_in_warn() {
        let mut caps = good();
        caps.bwrap = None;
        let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
        assert!(matches!(r, Resolution::Refused { .. }));
        assert!(reasons(&r).contains("apt install bubblewrap"), "{r:?}");
        let r = resolve(&caps, &needs(), SandboxPolicy::Warn);
        assert!(
            matches!(r, Resolution::Degraded { plan: DIRECT, .. }),
            "{r:?}"
        );
    }

    #[test]
    fn a_bad_override_is_named() {
        let mut caps = good();
        caps.bwrap = None;
        caps.bwrap_override_problem = Some("PALISADE_BWRAP=/nope cannot be run".into());
        let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
        assert!(reasons(&r).contains("PALISADE_BWRAP=/nope"), "{r:?}");
    }

    #[test]
    fn old_bwrap_without_disable_userns_is_a_hard_gap() {
        let mut caps = good();
        if let Some(b) = caps.bwrap.as_mut() {
            b.disable_userns = false;
            b.version = Some("0.6.2".into());
        }
        let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
        assert!(reasons(&r).contains("0.6.2 is too old"), "{r:?}");
        let r = resolve(&caps, &needs(), SandboxPolicy::Warn);
        assert!(matches!(r, Resolution::Degraded { plan: DIRECT, .. }));
    }

    #[test]
    fn apparmor_restriction_names_the_profile_and_the_sysctl() {
        let mut caps = good();
        caps.apparmor_restrict_userns = Some(true);
        caps.userns = Userns::Unusable {
            error: "bwrap: setting up uid map: Permission denied".into(),
        };
        let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
        let text = reasons(&r);
        assert!(text.contains("/etc/apparmor.d/bwrap"), "{text}");
        assert!(
            text.contains("kernel.apparmor_restrict_unprivileged_userns=0"),
            "{text}"
        );
        assert!(text.contains("Permission denied"), "{text}");
    }

    #[test]
    fn static_signals_decide_when_the_trial_was_not_run() {
        let mut caps = good();
        caps.userns = Userns::NotProbed;
        assert_eq!(
            resolve(&caps, &needs(), SandboxPolicy::Enforce),
            Resolution::Sandboxed { plan: FULL }
        );
        caps.max_user_namespaces = Some(0);
        let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
        assert!(
            reasons(&r).contains("user.max_user_namespaces=15000"),
            "{r:?}"
        );
        caps.max_user_namespaces = Some(10);
        caps.unprivileged_userns_clone = Some(false);
        let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
        assert!(reasons(&r).contains("unprivileged_userns_clone=1"), "{r:?}");
        // root is not subject to the unprivileged restrictions
        caps.root = true;
        caps.apparmor_restrict_userns = Some(true);
        assert!(matches!(
            resolve(&caps, &needs(), SandboxPolicy::Enforce),
            Resolution::Sandboxed { .. }
        ));
    }

    #[test]
    fn failed_trial_without_a_known_cause_still_refuses() {
        let mut caps = good();
        caps.userns = Userns::Unusable {
            error: "bwrap: No permissions to create new namespace".into(),
        };
        let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
        assert!(reasons(&r).contains("No permissions"), "{r:?}");
        assert!(reasons(&r).contains("CONFIG_USER_NS"), "{r:?}");
    }

    #[test]
    fn no_seccomp_is_soft_warn_keeps_the_sandbox() {
        let mut caps = good();
        caps.seccomp = false;
        assert!(matches!(
            resolve(&caps, &needs(), SandboxPolicy::Enforce),
            Resolution::Refused { .. }
        ));
        let r = resolve(&caps, &needs(), SandboxPolicy::Warn);
        assert_eq!(
            r,
            Resolution::Degraded {
                plan: Plan {
                    seccomp: false,
                    ..FULL
                },
                reasons: vec![reason(
                    "the kernel has no seccomp filter support: AF_VSOCK, io_uring and keyring calls stay open",
                    "use a kernel built with CONFIG_SECCOMP_FILTER"
                )]
            }
        );
    }

    #[test]
    fn egress_is_not_supported_yet_and_degrades_to_host_network_in_warn() {
        let n = Needs {
            egress: true,
            ..needs()
        };
        let r = resolve(&good(), &n, SandboxPolicy::Enforce);
        assert!(reasons(&r).contains("not supported yet"), "{r:?}");
        let r = resolve(&good(), &n, SandboxPolicy::Warn);
        assert!(matches!(
            r,
            Resolution::Degraded {
                plan: Plan {
                    bwrap: true,
                    host_network: true,
                    ..
                },
                ..
            }
        ));
    }

    #[test]
    fn srt_backend_is_refused_in_enforce_and_runs_under_bwrap_in_warn() {
        let n = Needs {
            backend: Backend::Srt,
            ..needs()
        };
        assert!(
            reasons(&resolve(&good(), &n, SandboxPolicy::Enforce)).contains("set backend to bwrap")
        );
        assert!(matches!(
            resolve(&good(), &n, SandboxPolicy::Warn),
            Resolution::Degraded { plan: FULL, .. }
        ));
    }

    #[test]
    fn hard_and_soft_gaps_are_all_reported() {
        let mut caps = good();
        caps.bwrap = None;
        caps.seccomp = false;
        let r = resolve(&caps, &needs(), SandboxPolicy::Enforce);
        let Resolution::Refused { reasons } = r else {
            panic!("expected refusal")
        };
        assert_eq!(reasons.len(), 2);
    }
}
