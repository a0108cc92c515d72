//! The resource limits of a launched process tree, made real: the server's cgroup when the
//! machine offers one, else per-process rlimits, and the task count the supervisor must
//! watch itself where neither binds (root without a pids cgroup). `attach` is the one place
//! a contained command gets them, whatever its tier.
//!
//! Creates the cgroup (removed when `Prepared` is dropped) and registers child-side hooks;
//! starts nothing. Never: fail a launch because no cgroup is available (the rlimits apply
//! and a warning says which limit falls back), nor leave a limit unenforced silently.

use std::os::fd::RawFd;

use crate::sandbox::cgroup::{self, Cgroup};
use crate::sandbox::{sys, ResourceLimits};

/// What `attach` leaves for the launch to keep.
pub(super) struct Attached {
    /// Remove when the child is reaped (see `Prepared`).
    pub(super) cgroup: Option<Cgroup>,
    /// The task limit the supervisor counts itself (see `task_watch`).
    pub(super) task_watch: Option<u64>,
}

/// What the child itself must do for its limits (see `plan`).
pub(super) struct ChildLimits {
    /// The cgroup files it joins through from its first instruction (empty: no cgroup).
    pub(super) cgroup_joins: Vec<std::ffi::CString>,
    /// The rlimits the cgroup does not cover.
    pub(super) rlimits: ResourceLimits,
}

/// The limits of server `name`: its cgroup (made here), and what the child must do (join it,
/// set the rlimits it does not cover).
pub(super) fn plan(name: &str, limits: &ResourceLimits) -> (Attached, ChildLimits) {
    let cgroup = make_cgroup(name, limits);
    let task_watch = task_watch(limits, cgroup.as_ref());
    let mut rlimits = fallback_rlimits(limits);
    let mut cgroup_joins = Vec::new();
    if let Some(cg) = &cgroup {
        // The cgroup limits the tree; the per-process fallbacks would only add limits the
        // user did not ask for.
        if cg.limits_memory() {
            rlimits.data = None;
        }
        if cg.limits_pids() {
            rlimits.processes = None;
        }
        cgroup_joins = cg.join_files();
    }
    (
        Attached { cgroup, task_watch },
        ChildLimits {
            cgroup_joins,
            rlimits,
        },
    )
}

/// Gives `cmd` the limits of server `name`: its cgroup joined from the child's first
/// instruction, the rlimits the cgroup does not cover, and the child-side setup (descriptors
/// above stderr closed except `keep`).
pub(super) fn attach(
    cmd: &mut std::process::Command,
    name: &str,
    limits: &ResourceLimits,
    keep: Option<RawFd>,
) -> Attached {
    let (attached, child) = plan(name, limits);
    sys::join_cgroups(cmd, child.cgroup_joins);
    sys::install_child_setup(cmd, keep, child.rlimits);
    attached
}

/// The rlimits to set when no cgroup enforces memory and tasks: the task budget made
/// per-server (see `sys::nproc_fallback`).
pub(super) fn fallback_rlimits(l: &ResourceLimits) -> ResourceLimits {
    ResourceLimits {
        processes: l.processes.map(sys::nproc_fallback),
        ..*l
    }
}

/// The server's cgroup, or none when the machine offers no writable controller or the config
/// says `cgroup: false` (the rlimit fallbacks then apply; logged, not fatal).
fn make_cgroup(name: &str, l: &ResourceLimits) -> Option<Cgroup> {
    let limits = cgroup::CgroupLimits {
        memory_bytes: l.memory,
        pids: l.pids,
    };
    let made = if !l.cgroup {
        // `sandbox.limits.cgroup: false`, or `palisade run` (nothing would remove it).
        tracing::debug!(server = %name, "no cgroup asked for: rlimits only");
        None
    } else {
        match cgroup::Cgroup::create(name, limits) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(server = %name, "no cgroup for memory and task limits ({e}); rlimits only (see `palisade check`)");
                None
            }
        }
    };
    if let Some(cg) = &made {
        // A partly delegated cgroup (memory but not pids, or the reverse): say which limit
        // falls back to its rlimit.
        if l.memory.is_some() && !cg.limits_memory() {
            tracing::warn!(server = %name, "no memory controller in its cgroup: memoryMb bounds each process (RLIMIT_DATA), not the tree (see `palisade check`)");
        }
        if l.pids.is_some() && !cg.limits_pids() && !nix::unistd::getuid().is_root() {
            tracing::warn!(server = %name, "no pids controller in its cgroup: processes is held by RLIMIT_NPROC (see `palisade check`)");
        }
    }
    let pids_held = made.as_ref().is_some_and(|c| c.limits_pids());
    // Said at info, not warn: as root without a cgroup this is every launch of `run` (and a
    // normal start must print nothing); `check` and docs/configuration.md say it once.
    if !pids_held && l.pids.is_some() && nix::unistd::getuid().is_root() {
        tracing::info!(
            server = %name,
            "its task limit is not enforced by the kernel: no cgroup, and the kernel exempts uid 0 \
             from RLIMIT_NPROC (`serve` counts the server's tasks every 0.5 s and kills it past \
             the limit; `run` cannot)"
        );
    }
    made
}

/// The task limit the supervisor must count itself: where no pids cgroup holds it and the
/// user is root, whom RLIMIT_NPROC does not bind.
pub(super) fn task_watch(l: &ResourceLimits, cgroup: Option<&Cgroup>) -> Option<u64> {
    let pids_cgroup = cgroup.is_some_and(|c| c.limits_pids());
    if pids_cgroup || !nix::unistd::getuid().is_root() {
        return None;
    }
    l.pids
}
