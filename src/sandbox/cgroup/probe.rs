//! Whether servers get a cgroup on this machine, for `palisade check`: found by making (and
//! removing) one for real, except where that would first move palisade into its leaf, which
//! is reported without doing it.

use std::path::Path;

use super::plan::{parse_self, plan_v2, v2_base, V2Plan};
use super::v2::ours;
use super::{Cgroup, CgroupLimits, Kind};

/// Whether servers get a cgroup on this machine, found by making (and removing) one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Support {
    /// `hierarchy` names the controllers used; `memory` and `pids` say which limit the
    /// cgroup holds (the other falls back to its rlimit).
    Usable {
        hierarchy: String,
        memory: bool,
        pids: bool,
    },
    Unusable {
        reason: String,
    },
}

/// Whether a server launched now would get a cgroup: made (and removed) for real, except
/// where that would first move palisade into its leaf (a v2 cgroup holding only this
/// process): `check` reports that without doing it.
pub fn probe() -> Support {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        let me = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        if let (Some(p), _, _) = parse_self(&me) {
            let base_rel = v2_base(&p, std::process::id());
            let base = root.join(base_rel.trim_start_matches('/'));
            let read = |f: &str| std::fs::read_to_string(base.join(f)).unwrap_or_default();
            let procs: Vec<i32> = read("cgroup.procs")
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            let plan = plan_v2(
                base_rel == "/",
                &read("cgroup.controllers"),
                &read("cgroup.subtree_control"),
                &procs,
                &ours(&procs, std::process::id() as i32),
            );
            match plan {
                V2Plan::Unusable(reason) => return Support::Unusable { reason },
                V2Plan::MoveThenEnable(_, c) => {
                    return Support::Usable {
                        hierarchy: format!(
                            "cgroup v2 {} under {} (palisade first moves itself into a leaf \
                             there)",
                            c.describe(),
                            base.display()
                        ),
                        memory: c.memory,
                        pids: c.pids,
                    }
                }
                V2Plan::Ready(_) | V2Plan::Enable(_) => {}
            }
        }
    }
    let limits = CgroupLimits {
        memory_bytes: Some(1 << 30),
        pids: Some(64),
    };
    match Cgroup::create("check-probe", limits) {
        Ok(Some(cg)) => {
            let kinds: Vec<String> = cg
                .dirs
                .iter()
                .map(|(k, _)| match k {
                    Kind::V2(c) => format!("cgroup v2 {}", c.describe()),
                    Kind::V1Memory => "cgroup v1 memory".into(),
                    Kind::V1Pids => "cgroup v1 pids".into(),
                })
                .collect();
            Support::Usable {
                hierarchy: kinds.join(", "),
                memory: cg.limits_memory(),
                pids: cg.limits_pids(),
            }
        }
        Ok(None) => Support::Unusable {
            reason: "no writable memory or pids controller under /sys/fs/cgroup".into(),
        },
        Err(e) => Support::Unusable {
            reason: e.to_string(),
        },
    }
}
