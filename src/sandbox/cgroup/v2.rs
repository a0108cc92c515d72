//! Palisade's own cgroup v2 made ready for server cgroups, following `plan_v2`: the
//! controllers enabled for children, after moving palisade and its children (never another
//! process) into the leaf `palisade-<pid>-gateway` when the cgroup holds processes. The
//! filesystem side of the plan.
//!
//! Never: move a process that is not palisade's or a descendant of it.

use std::path::Path;

use super::plan::{gateway_leaf, plan_v2, Controllers, V2Plan};

pub(super) fn write(dir: &Path, file: &str, value: &str) -> std::io::Result<()> {
    std::fs::write(dir.join(file), value)
}

/// Processes in `procs` that are `me` or descend from it (by their parent pids).
pub(super) fn ours(procs: &[i32], me: i32) -> Vec<i32> {
    let parent = |pid: i32| -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name may hold spaces and parentheses: the fields follow the last ')'.
        let rest = &stat[stat.rfind(')')? + 1..];
        rest.split_whitespace().nth(1)?.parse().ok()
    };
    procs
        .iter()
        .copied()
        .filter(|&p| {
            let mut cur = p;
            for _ in 0..64 {
                if cur == me {
                    return true;
                }
                match parent(cur) {
                    Some(pp) if pp > 1 => cur = pp,
                    _ => return false,
                }
            }
            false
        })
        .collect()
}

/// Prepares palisade's cgroup v2 at `base` for server cgroups and returns the controllers
/// they get; `Err` says why they get none.
pub(super) fn prepare_v2(base: &Path, is_root: bool) -> std::io::Result<Controllers> {
    let read = |f: &str| std::fs::read_to_string(base.join(f)).unwrap_or_default();
    let procs: Vec<i32> = read("cgroup.procs")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let me = std::process::id();
    let plan = plan_v2(
        is_root,
        &read("cgroup.controllers"),
        &read("cgroup.subtree_control"),
        &procs,
        &ours(&procs, me as i32),
    );
    match plan {
        V2Plan::Ready(c) => Ok(c),
        V2Plan::Enable(c) => write(base, "cgroup.subtree_control", &c.enable_line()).map(|()| c),
        V2Plan::MoveThenEnable(pids, c) => {
            let leaf = base.join(gateway_leaf(me));
            match std::fs::create_dir(&leaf) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            for pid in pids {
                // A child that exited meanwhile is gone from the cgroup anyway.
                match write(&leaf, "cgroup.procs", &pid.to_string()) {
                    Err(e) if e.raw_os_error() != Some(libc::ESRCH) => return Err(e),
                    _ => {}
                }
            }
            tracing::info!(
                "moved palisade into {} so that servers get their own cgroups",
                leaf.display()
            );
            // Earlier palisades' leaves (a restarted service) are empty once they exit.
            super::orphans::remove_orphans(base, me);
            write(base, "cgroup.subtree_control", &c.enable_line()).map(|()| c)
        }
        V2Plan::Unusable(why) => Err(std::io::Error::other(why)),
    }
}
