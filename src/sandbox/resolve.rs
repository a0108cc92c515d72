//! Enforce or warn, decided per server: (machine capabilities, what the server needs, the
//! sandbox policy) -> sandboxed, degraded with reasons, or refused with reasons. Pure: the
//! same inputs always give the same answer, and every reason names its fix (a package, a
//! sysctl, an AppArmor profile, a configuration change).
//!
//! Gaps come in two kinds. A *hard* gap means bubblewrap cannot run at all (missing, too old,
//! no user namespaces): warn mode then runs the command directly. A *soft* gap means the
//! sandbox runs with less than was asked (no seccomp, network wider than configured, a
//! backend not available): warn mode runs it in the weaker sandbox. Enforce refuses both.
//!
//! Network: a server with a domain allowlist needs socat (inside its sandbox) and a running
//! egress proxy; without either, warn mode shares the host network (the allowlist is then
//! NOT enforced, and every audit record says so). `backend: srt` needs srt, runnable, and
//! the tools srt needs on Linux (bwrap, socat, rg); without them warn mode falls back to
//! palisade's own bubblewrap sandbox.

use std::fmt;

use serde::Serialize;

use super::capabilities::{Capabilities, Landlock, Userns};
use crate::config::{Backend, SandboxPolicy};

/// What a server asks of its sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needs {
    /// `false` when the user opted the server out (`"sandbox": false`).
    pub sandboxed: bool,
    pub backend: Backend,
    /// It needs outbound HTTP(S) to an allowlist (the egress proxy).
    pub egress: bool,
    /// Why the egress proxy cannot serve this server (it failed to start), if it cannot.
    pub egress_problem: Option<String>,
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
    /// Run under srt instead of palisade's own bubblewrap sandbox (`backend: srt`).
    pub srt: bool,
    /// Run under the Landlock tier instead of bubblewrap (`bwrap` is then false).
    pub landlock: bool,
}

impl Plan {
    /// In some sandbox at all (`false`: run directly, warn mode only).
    pub fn contained(&self) -> bool {
        self.bwrap || self.landlock
    }
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
    if needs.backend == Backend::Srt {
        let srt_gaps = srt_gaps(caps);
        if srt_gaps.is_empty() {
            plan.srt = true;
        }
        gaps.extend(srt_gaps);
    }
    if needs.egress && !plan.srt {
        // srt brings its own proxy and socat bridges; the native sandbox needs socat inside
        // and palisade's proxy outside.
        let mut egress = Vec::new();
        if caps.socat.is_none() {
            egress.push(reason(
                "socat is not installed: the sandbox cannot reach the egress proxy, so the domain allowlist cannot be enforced",
                "install socat (Debian/Ubuntu: apt install socat; Fedora: dnf install socat); under sandbox policy warn the server runs with the HOST network meanwhile",
            ));
        }
        if let Some(problem) = &needs.egress_problem {
            egress.push(reason(
                format!("the egress proxy cannot serve this server: {problem}"),
                "fix the cause above (a writable, private temporary directory is needed); under sandbox policy warn the server runs with the HOST network meanwhile",
            ));
        }
        if !egress.is_empty() {
            plan.host_network = true;
            gaps.extend(egress);
        }
    }
    gaps
}

/// Why srt cannot run here: srt itself, or one of the tools it needs on Linux.
fn srt_gaps(caps: &Capabilities) -> Vec<Reason> {
    let mut gaps = Vec::new();
    let fallback = "set backend to bwrap (palisade's own sandbox, stricter: closed reads, cleared environment, seccomp); under sandbox policy warn it runs instead";
    match (&caps.srt, &caps.srt_problem) {
        (None, _) => gaps.push(reason(
            "srt (Anthropic sandbox-runtime) is not installed or not in PATH",
            format!(
                "npm install -g @anthropic-ai/sandbox-runtime (or point {} at it), or {fallback}",
                super::capabilities::SRT_ENV
            ),
        )),
        (Some(p), Some(problem)) => gaps.push(reason(
            format!("srt at {} cannot run: {problem}", p.display()),
            format!("install a Node.js version srt supports, or {fallback}"),
        )),
        (Some(_), None) => {}
    }
    for (have, tool, pkg) in [
        (caps.bwrap.is_some(), "bubblewrap (bwrap)", "bubblewrap"),
        (caps.socat.is_some(), "socat", "socat"),
        (caps.ripgrep.is_some(), "ripgrep (rg)", "ripgrep"),
    ] {
        if !have {
            gaps.push(reason(
                format!("srt needs {tool}, which is not installed"),
                format!("apt install {pkg}, or {fallback}"),
            ));
        }
    }
    gaps
}

/// Why the Landlock tier cannot run at all here, if it cannot.
fn landlock_hard_gaps(caps: &Capabilities) -> Vec<Reason> {
    match caps.landlock {
        Landlock::Available { .. } => Vec::new(),
        Landlock::NotEnabled => vec![reason(
            "Landlock is built into this kernel but not enabled",
            "add landlock to the kernel's lsm= boot parameter (e.g. lsm=landlock,lockdown,yama,integrity,apparmor),              or make bubblewrap usable (user namespaces)",
        )],
        Landlock::NotImplemented => vec![reason(
            "Landlock is not available (a kernel before 5.13 or without CONFIG_SECURITY_LANDLOCK, or a seccomp              profile around palisade refuses its system calls)",
            "use Linux 5.13 or later with Landlock enabled (6.12 or later for signal scoping), allow the              landlock_* system calls in the container's seccomp profile, or make bubblewrap usable (user namespaces)",
        )],
    }
}

/// Gaps that leave the Landlock tier weaker than asked.
fn landlock_soft_gaps(caps: &Capabilities, needs: &Needs, plan: &mut Plan) -> Vec<Reason> {
    let abi = caps.landlock.abi().unwrap_or(0);
    let mut gaps = Vec::new();
    if !caps.seccomp {
        plan.seccomp = false;
        gaps.push(reason(
            "the kernel has no seccomp filter support: under Landlock, host unix sockets, UDP, raw and              netlink sockets, io_uring and nested user namespaces stay open",
            "use a kernel built with CONFIG_SECCOMP_FILTER",
        ));
    }
    if abi < 6 {
        gaps.push(reason(
            format!(
                "Landlock ABI {abi} cannot scope signals: the server can signal host processes of the same user                  (ABI 6, Linux 6.12, can)"
            ),
            "use Linux 6.12 or later, or backend bwrap (its PID namespace hides host processes)",
        ));
    }
    if needs.egress {
        // ABI 4 confines TCP to the proxy's loopback endpoint (one port, a secret); before
        // it, TCP cannot be governed at all.
        let gap = if abi < 4 {
            Some(reason(
                format!(
                    "sandbox.network.allowedDomains needs Landlock ABI 4 (Linux 6.7) to confine TCP to the egress \
                     proxy; this kernel has ABI {abi}"
                ),
                "use backend bwrap (user namespaces needed), a kernel 6.7 or later, or remove \
                 sandbox.network.allowedDomains; under sandbox policy warn the server gets the HOST network",
            ))
        } else {
            needs.egress_problem.as_ref().map(|problem| {
                reason(
                    format!("the egress proxy cannot serve this server: {problem}"),
                    "fix the cause above (a writable, private temporary directory and a loopback port are \
                     needed); under sandbox policy warn the server runs with the HOST network meanwhile",
                )
            })
        };
        if let Some(gap) = gap {
            plan.host_network = true;
            gaps.push(gap);
        }
    }
    gaps
}

/// The Landlock tier's decision.
fn resolve_landlock(caps: &Capabilities, needs: &Needs, policy: SandboxPolicy) -> Resolution {
    let mut plan = Plan {
        bwrap: false,
        seccomp: true,
        host_network: false,
        srt: false,
        landlock: true,
    };
    let hard = landlock_hard_gaps(caps);
    let soft = if hard.is_empty() {
        landlock_soft_gaps(caps, needs, &mut plan)
    } else {
        Vec::new()
    };
    finish(plan, hard, soft, policy)
}

/// Which tier `backend` gets on this machine, and why (for `check` and the launch log).
pub fn tier(caps: &Capabilities, backend: Backend) -> (Backend, String) {
    match backend {
        Backend::Auto => {
            let bwrap = hard_gaps(caps);
            if bwrap.is_empty() {
                return (
                    Backend::Bwrap,
                    "auto: bubblewrap can create its namespaces".into(),
                );
            }
            let why = bwrap
                .iter()
                .map(|r| r.problem.clone())
                .collect::<Vec<_>>()
                .join("; ");
            match caps.landlock.abi() {
                Some(abi) => (
                    Backend::Landlock,
                    format!("auto: bubblewrap cannot run here ({why}); Landlock ABI {abi} can"),
                ),
                None => (
                    Backend::Auto,
                    format!("auto: neither bubblewrap ({why}) nor Landlock is usable here"),
                ),
            }
        }
        other => (other, format!("backend {} (configured)", other.name())),
    }
}

/// Decides how to run a server.
pub fn resolve(caps: &Capabilities, needs: &Needs, policy: SandboxPolicy) -> Resolution {
    if !needs.sandboxed {
        return Resolution::OptedOut;
    }
    match tier(caps, needs.backend).0 {
        Backend::Landlock => return resolve_landlock(caps, needs, policy),
        Backend::Auto => {
            // Neither works: report both, bubblewrap's gaps first.
            let mut hard = hard_gaps(caps);
            hard.extend(landlock_hard_gaps(caps));
            let plan = Plan {
                bwrap: true,
                seccomp: true,
                host_network: false,
                srt: false,
                landlock: false,
            };
            return finish(plan, hard, Vec::new(), policy);
        }
        Backend::Bwrap | Backend::Srt => {}
    }
    let mut plan = Plan {
        bwrap: true,
        seccomp: true,
        host_network: false,
        srt: false,
        landlock: false,
    };
    let hard = hard_gaps(caps);
    let soft = soft_gaps(caps, needs, &mut plan);
    finish(plan, hard, soft, policy)
}

/// Hard gaps (the tier cannot run) and soft ones (it runs weaker) under `policy`.
fn finish(plan: Plan, hard: Vec<Reason>, soft: Vec<Reason>, policy: SandboxPolicy) -> Resolution {
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
                srt: false,
                landlock: false,
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
            ripgrep: Some("/usr/bin/rg".into()),
            srt: None,
            srt_problem: None,
            landlock: Landlock::Available { abi: 7 },
        }
    }

    fn needs() -> Needs {
        Needs {
            sandboxed: true,
            backend: Backend::Bwrap,
            egress: false,
            egress_problem: None,
        }
    }

    const FULL: Plan = Plan {
        bwrap: true,
        seccomp: true,
        host_network: false,
        srt: false,
        landlock: false,
    };
    const DIRECT: Plan = Plan {
        bwrap: false,
        seccomp: false,
        host_network: true,
        srt: false,
        landlock: false,
    };
    const LANDLOCK: Plan = Plan {
        bwrap: false,
        seccomp: true,
        host_network: false,
        srt: false,
        landlock: true,
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

    fn egress() -> Needs {
        Needs {
            egress: true,
            ..needs()
        }
    }

    #[test]
    fn egress_with_socat_and_a_proxy_is_fully_sandboxed() {
        for p in [SandboxPolicy::Enforce, SandboxPolicy::Warn] {
            assert_eq!(
                resolve(&good(), &egress(), p),
                Resolution::Sandboxed { plan: FULL }
            );
        }
    }

    #[test]
    fn egress_without_socat_is_refused_in_enforce_and_gets_the_host_network_in_warn() {
        let mut caps = good();
        caps.socat = None;
        let r = resolve(&caps, &egress(), SandboxPolicy::Enforce);
        assert!(matches!(r, Resolution::Refused { .. }), "{r:?}");
        assert!(reasons(&r).contains("apt install socat"), "{r:?}");
        let r = resolve(&caps, &egress(), SandboxPolicy::Warn);
        assert_eq!(
            r,
            Resolution::Degraded {
                plan: Plan {
                    host_network: true,
                    ..FULL
                },
                reasons: match resolve(&caps, &egress(), SandboxPolicy::Enforce) {
                    Resolution::Refused { reasons } => reasons,
                    _ => unreachable!(),
                }
            }
        );
        // A server without an allowlist does not care about socat.
        assert_eq!(
            resolve(&caps, &needs(), SandboxPolicy::Enforce),
            Resolution::Sandboxed { plan: FULL }
        );
    }

    #[test]
    fn a_proxy_that_cannot_start_is_a_soft_gap_naming_the_cause() {
        let n = Needs {
            egress_problem: Some("cannot create /tmp/x: read-only file system".into()),
            ..egress()
        };
        let r = resolve(&good(), &n, SandboxPolicy::Enforce);
        assert!(reasons(&r).contains("read-only file system"), "{r:?}");
        assert!(matches!(
            resolve(&good(), &n, SandboxPolicy::Warn),
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

    fn srt_caps() -> Capabilities {
        Capabilities {
            srt: Some("/opt/srt/bin/srt".into()),
            ..good()
        }
    }

    #[test]
    fn srt_backend_runs_under_srt_when_it_and_its_tools_are_there() {
        let n = Needs {
            backend: Backend::Srt,
            ..egress()
        };
        // srt brings its own proxy: socat is its dependency, not an egress gap.
        assert_eq!(
            resolve(&srt_caps(), &n, SandboxPolicy::Enforce),
            Resolution::Sandboxed {
                plan: Plan { srt: true, ..FULL }
            }
        );
    }

    #[test]
    fn srt_missing_with_an_allowlist_falls_back_to_the_native_proxy_in_warn() {
        let n = Needs {
            backend: Backend::Srt,
            ..egress()
        };
        // The proxy socket is ready: the fallback keeps the allowlist enforced.
        assert!(matches!(
            resolve(&good(), &n, SandboxPolicy::Warn),
            Resolution::Degraded { plan: FULL, .. }
        ));
        // And without socat the fallback would share the host network, which is said.
        let mut caps = good();
        caps.socat = None;
        let r = resolve(&caps, &n, SandboxPolicy::Warn);
        assert!(reasons(&r).contains("apt install socat"), "{r:?}");
        assert!(matches!(
            r,
            Resolution::Degraded {
                plan: Plan {
                    host_network: true,
                    ..
                },
                ..
            }
        ));
    }

    #[test]
    fn srt_missing_or_broken_or_without_its_tools_is_refused_in_enforce_and_falls_back_in_warn() {
        let n = Needs {
            backend: Backend::Srt,
            ..needs()
        };
        let r = resolve(&good(), &n, SandboxPolicy::Enforce);
        assert!(reasons(&r).contains("srt (Anthropic sandbox-runtime) is not installed"));
        assert!(reasons(&r).contains("set backend to bwrap"), "{r:?}");
        assert!(matches!(
            resolve(&good(), &n, SandboxPolicy::Warn),
            Resolution::Degraded { plan: FULL, .. }
        ));
        let mut caps = srt_caps();
        caps.srt_problem = Some("node v20 is too old".into());
        assert!(reasons(&resolve(&caps, &n, SandboxPolicy::Enforce)).contains("node v20"));
        let mut caps = srt_caps();
        caps.ripgrep = None;
        let r = resolve(&caps, &n, SandboxPolicy::Enforce);
        assert!(reasons(&r).contains("srt needs ripgrep (rg)"), "{r:?}");
        let r = resolve(&caps, &n, SandboxPolicy::Warn);
        assert!(
            matches!(r, Resolution::Degraded { plan: FULL, .. }),
            "{r:?}"
        );
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
    fn landlock_needs() -> Needs {
        Needs {
            backend: Backend::Landlock,
            ..needs()
        }
    }

    fn no_userns() -> Capabilities {
        let mut caps = good();
        caps.userns = Userns::Unusable {
            error: "bwrap: No space left on device".into(),
        };
        caps
    }

    #[test]
    fn auto_picks_bwrap_where_it_works_and_landlock_where_it_does_not() {
        let auto = Needs {
            backend: Backend::Auto,
            ..needs()
        };
        assert_eq!(
            resolve(&good(), &auto, SandboxPolicy::Enforce),
            Resolution::Sandboxed { plan: FULL }
        );
        assert_eq!(
            resolve(&no_userns(), &auto, SandboxPolicy::Enforce),
            Resolution::Sandboxed { plan: LANDLOCK }
        );
        let (tier_used, why) = tier(&no_userns(), Backend::Auto);
        assert_eq!(tier_used, Backend::Landlock);
        assert!(why.contains("No space left on device"), "{why}");
        assert!(why.contains("Landlock ABI 7"), "{why}");
    }

    #[test]
    fn auto_with_neither_tier_refuses_in_enforce_naming_both_and_runs_directly_in_warn() {
        let mut caps = no_userns();
        caps.landlock = Landlock::NotImplemented;
        let auto = Needs {
            backend: Backend::Auto,
            ..needs()
        };
        let r = resolve(&caps, &auto, SandboxPolicy::Enforce);
        assert!(matches!(r, Resolution::Refused { .. }), "{r:?}");
        assert!(reasons(&r).contains("No space left"), "{r:?}");
        assert!(reasons(&r).contains("Landlock is not available"), "{r:?}");
        assert!(matches!(
            resolve(&caps, &auto, SandboxPolicy::Warn),
            Resolution::Degraded { plan: DIRECT, .. }
        ));
    }

    #[test]
    fn landlock_backend_needs_no_bubblewrap() {
        let mut caps = no_userns();
        caps.bwrap = None;
        assert_eq!(
            resolve(&caps, &landlock_needs(), SandboxPolicy::Enforce),
            Resolution::Sandboxed { plan: LANDLOCK }
        );
        caps.landlock = Landlock::NotEnabled;
        let r = resolve(&caps, &landlock_needs(), SandboxPolicy::Enforce);
        assert!(reasons(&r).contains("lsm="), "{r:?}");
    }

    #[test]
    fn an_allowlist_under_landlock_abi_4_is_sandboxed_through_the_proxy_without_socat() {
        let n = Needs {
            egress: true,
            ..landlock_needs()
        };
        let mut caps = good();
        caps.socat = None;
        assert_eq!(
            resolve(&caps, &n, SandboxPolicy::Enforce),
            Resolution::Sandboxed { plan: LANDLOCK }
        );
        // A proxy that could not serve it: refused in enforce, host network in warn.
        let failed = Needs {
            egress_problem: Some("cannot open a loopback proxy port".into()),
            ..n.clone()
        };
        let r = resolve(&caps, &failed, SandboxPolicy::Enforce);
        assert!(reasons(&r).contains("loopback proxy port"), "{r:?}");
        assert!(matches!(
            resolve(&caps, &failed, SandboxPolicy::Warn),
            Resolution::Degraded {
                plan: Plan {
                    landlock: true,
                    host_network: true,
                    ..
                },
                ..
            }
        ));
    }

    #[test]
    fn an_allowlist_under_landlock_before_abi_4_is_refused_in_enforce_naming_the_field_and_gets_the_host_network_in_warn(
    ) {
        let n = Needs {
            egress: true,
            ..landlock_needs()
        };
        let mut caps = good();
        caps.landlock = Landlock::Available { abi: 3 };
        let r = resolve(&caps, &n, SandboxPolicy::Enforce);
        assert!(matches!(r, Resolution::Refused { .. }), "{r:?}");
        assert!(
            reasons(&r).contains("sandbox.network.allowedDomains needs Landlock ABI 4 (Linux 6.7)"),
            "{r:?}"
        );
        assert!(reasons(&r).contains("this kernel has ABI 3"), "{r:?}");
        assert!(reasons(&r).contains("backend bwrap"), "{r:?}");
        assert!(matches!(
            resolve(&caps, &n, SandboxPolicy::Warn),
            Resolution::Degraded {
                plan: Plan {
                    landlock: true,
                    host_network: true,
                    ..
                },
                ..
            }
        ));
    }

    #[test]
    fn landlock_before_abi_6_cannot_scope_signals_and_says_so() {
        let mut caps = good();
        caps.landlock = Landlock::Available { abi: 5 };
        let r = resolve(&caps, &landlock_needs(), SandboxPolicy::Enforce);
        assert!(reasons(&r).contains("cannot scope signals"), "{r:?}");
        assert!(matches!(
            resolve(&caps, &landlock_needs(), SandboxPolicy::Warn),
            Resolution::Degraded { plan: LANDLOCK, .. }
        ));
    }
}
