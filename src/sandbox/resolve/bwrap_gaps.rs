//! What bubblewrap (and srt, which runs on it) lacks on this machine: the hard gaps that stop
//! it running at all and the soft ones that leave it weaker, each with its fix. Kept apart from
//! the verdict in `resolve` so each tier's gaps read on their own. Pure: reads only the probed
//! `Capabilities`, never the machine.

use super::{reason, Needs, Plan, Reason};
use crate::config::Backend;
use crate::sandbox::capabilities::{Capabilities, Userns};

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
pub(super) fn hard_gaps(caps: &Capabilities) -> Vec<Reason> {
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
pub(super) fn soft_gaps(caps: &Capabilities, needs: &Needs, plan: &mut Plan) -> Vec<Reason> {
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
                crate::sandbox::capabilities::SRT_ENV
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
