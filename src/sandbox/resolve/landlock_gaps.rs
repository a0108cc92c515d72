//! What the Landlock tier lacks on this machine (no Landlock, an ABI too old for signal
//! scoping or for confining TCP to the egress proxy, no seccomp), and the Landlock tier's
//! decision. Kept apart from the bubblewrap gaps because the tiers fail for different
//! reasons and name different fixes. Pure: reads only the probed `Capabilities`.

use super::{finish, reason, Needs, Plan, Reason, Resolution};
use crate::config::SandboxPolicy;
use crate::sandbox::capabilities::{Capabilities, Landlock};

/// Why the Landlock tier cannot run at all here, if it cannot.
pub(super) fn landlock_hard_gaps(caps: &Capabilities) -> Vec<Reason> {
    match caps.landlock {
        Landlock::Available { .. } => Vec::new(),
        Landlock::NotEnabled => vec![reason(
            "Landlock is built into this kernel but not enabled",
            "add landlock to the kernel's lsm= boot parameter (e.g. lsm=landlock,lockdown,yama,integrity,apparmor), or make bubblewrap usable (user namespaces)",
        )],
        Landlock::NotImplemented => vec![reason(
            "Landlock is not available (a kernel before 5.13 or without CONFIG_SECURITY_LANDLOCK, or a seccomp profile around palisade refuses its system calls)",
            "use Linux 5.13 or later with Landlock enabled (6.12 or later for signal scoping), allow the landlock_* system calls in the container's seccomp profile, or make bubblewrap usable (user namespaces)",
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
            "the kernel has no seccomp filter support: under Landlock, host unix sockets, UDP, raw and netlink sockets, io_uring and nested user namespaces stay open",
            "use a kernel built with CONFIG_SECCOMP_FILTER",
        ));
    }
    if abi < 6 {
        gaps.push(reason(
            format!(
                "Landlock ABI {abi} cannot scope signals: the server can signal host processes of the same user (ABI 6, Linux 6.12, can)"
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
        match gap {
            Some(gap) => {
                plan.host_network = true;
                gaps.push(gap);
            }
            None if needs.allowlist_by_port || caps.connect_mediation => {}
            // Landlock's network rules name a port, not an address: without palisade
            // deciding each connect, the proxy's port number on a host the server chooses
            // (one listening on every port) is reachable too, around the allowlist.
            None => gaps.push(reason(
                "sandbox.network.allowedDomains cannot be enforced by the Landlock tier here: its network \
                 rules name ports, not addresses, and palisade cannot check each connect's address itself \
                 (seccomp user notification, pidfd_getfd or process_vm_readv is missing or refused by a \
                 seccomp profile around palisade, Yama forbids reading its children, or an outer sandbox \
                 already holds the one seccomp listener allowed), so the server could also reach the egress \
                 proxy's port number on any host",
                "use Linux 5.9 or later and allow seccomp, pidfd_open, pidfd_getfd and process_vm_readv in the \
                 container's seccomp profile (podman's default does; Docker's allows pidfd_getfd only with \
                 --cap-add SYS_PTRACE), use backend bwrap (user namespaces needed), or remove \
                 sandbox.network.allowedDomains (no network); under sandbox policy warn the server runs with \
                 the allowlist enforced by port only",
            )),
        }
    }
    gaps
}

/// The Landlock tier's decision.
pub(super) fn resolve_landlock(
    caps: &Capabilities,
    needs: &Needs,
    policy: SandboxPolicy,
) -> Resolution {
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
