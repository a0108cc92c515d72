//! A cgroup per sandboxed server, where the machine lets palisade create one: `pids.max` and
//! a memory limit apply to the whole process tree, however it forks, and whatever uid it runs
//! as. Supports cgroup v2 (memory.max, memory.swap.max, pids.max) and the v1 `memory` and
//! `pids` hierarchies of hybrid hosts.
//!
//! On cgroup v2 a cgroup that holds processes cannot hand controllers to children ("no
//! internal processes"), and on a systemd host palisade's own cgroup holds palisade. When
//! that cgroup holds only palisade and its children (a service, or `systemd-run --scope`),
//! palisade first moves them into a leaf `palisade-<pid>-gateway` and then enables the
//! controllers; a cgroup shared with other processes (a terminal's scope) is left alone and
//! the launcher falls back to rlimits (see `ResourceLimits`). `plan_v2` decides, purely.
//!
//! Sits in `launch`: created before the spawn, joined by the child between fork and exec
//! (it writes `0` to `cgroup.procs`, on v1 to `tasks`: `join_files`), removed when dropped. Never:
//! fail a launch because no cgroup can be made (rlimits still apply; the caller logs it),
//! move a process that is not palisade's, or remove a cgroup that still holds processes
//! (rmdir refuses, the error is ignored).
//!
//! Split by job: `plan` decides (pure: `/proc/self/cgroup`, names, the v2 plan), `v2`
//! prepares palisade's own v2 cgroup (moves palisade into its leaf, enables controllers),
//! `probe` answers `check`, `orphans` removes what a killed palisade left; this module makes,
//! fills and removes a server's cgroup.

mod orphans;
mod plan;
mod probe;
mod v2;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use plan::Controllers;
use plan::{dir_name, parse_self, v2_base};
pub use probe::{probe, Support};
use v2::{prepare_v2, write};

/// The limits a cgroup enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupLimits {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
}

/// Which kind of hierarchy a directory belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A v2 cgroup with the controllers its parent hands down.
    V2(Controllers),
    V1Memory,
    V1Pids,
}

/// One server's cgroup directories (one on v2, up to two on v1).
#[derive(Debug)]
pub struct Cgroup {
    dirs: Vec<(Kind, PathBuf)>,
    limits: CgroupLimits,
}

impl Cgroup {
    /// Creates the cgroup of `server` with `limits`, or `Ok(None)` when nothing is limited or
    /// the machine offers no writable memory/pids controller.
    pub fn create(server: &str, limits: CgroupLimits) -> std::io::Result<Option<Cgroup>> {
        let me = std::fs::read_to_string("/proc/self/cgroup")?;
        Cgroup::create_in(Path::new("/sys/fs/cgroup"), &me, server, limits)
    }

    /// `create` against the hierarchy mounted at `root`, for a process whose
    /// `/proc/self/cgroup` reads `me` (a fixture hierarchy in tests).
    fn create_in(
        root: &Path,
        me: &str,
        server: &str,
        limits: CgroupLimits,
    ) -> std::io::Result<Option<Cgroup>> {
        if limits.memory_bytes.is_none() && limits.pids.is_none() {
            return Ok(None);
        }
        let (v2, mem, pids) = parse_self(me);
        let unique = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = dir_name(server, unique);
        let mut cg = Cgroup {
            dirs: Vec::new(),
            limits,
        };
        let rel = |p: &str| p.trim_start_matches('/').to_string();
        if root.join("cgroup.controllers").exists() {
            if let Some(p) = v2 {
                let base_rel = v2_base(&p, std::process::id());
                let base = root.join(rel(&base_rel));
                let ctrls = prepare_v2(&base, base_rel == "/")?;
                let useful = (ctrls.memory && limits.memory_bytes.is_some())
                    || (ctrls.pids && limits.pids.is_some());
                if useful {
                    orphans::remove_orphans(&base, std::process::id());
                    let dir = base.join(&name);
                    std::fs::create_dir(&dir)?;
                    cg.dirs.push((Kind::V2(ctrls), dir));
                }
            }
        } else {
            if let (Some(p), Some(_)) = (mem, limits.memory_bytes) {
                let base = root.join("memory").join(rel(&p));
                if base.join("memory.limit_in_bytes").exists() {
                    orphans::remove_orphans(&base, std::process::id());
                    let dir = base.join(&name);
                    std::fs::create_dir(&dir)?;
                    cg.dirs.push((Kind::V1Memory, dir));
                }
            }
            if let (Some(p), Some(_)) = (pids, limits.pids) {
                let base = root.join("pids").join(rel(&p));
                if base.join("cgroup.procs").exists() {
                    orphans::remove_orphans(&base, std::process::id());
                    let dir = base.join(&name);
                    std::fs::create_dir(&dir)?;
                    cg.dirs.push((Kind::V1Pids, dir));
                }
            }
        }
        if cg.dirs.is_empty() {
            return Ok(None);
        }
        cg.apply()?;
        Ok(Some(cg))
    }

    fn apply(&self) -> std::io::Result<()> {
        for (kind, dir) in &self.dirs {
            let mem = self.limits.memory_bytes.map(|b| b.to_string());
            let pids = self.limits.pids.map(|n| n.to_string());
            match kind {
                Kind::V2(c) => {
                    if let (true, Some(m)) = (c.memory, &mem) {
                        write(dir, "memory.max", m)?;
                        // Swap would only slow a memory hog down, not stop it.
                        let _ = write(dir, "memory.swap.max", "0");
                    }
                    if let (true, Some(p)) = (c.pids, &pids) {
                        write(dir, "pids.max", p)?;
                    }
                }
                Kind::V1Memory => {
                    if let Some(m) = &mem {
                        write(dir, "memory.limit_in_bytes", m)?;
                        let _ = write(dir, "memory.memsw.limit_in_bytes", m);
                    }
                }
                Kind::V1Pids => {
                    if let Some(p) = &pids {
                        write(dir, "pids.max", p)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// True when a memory controller enforces the memory limit.
    pub fn limits_memory(&self) -> bool {
        self.limits.memory_bytes.is_some()
            && self.dirs.iter().any(|(k, _)| {
                matches!(
                    k,
                    Kind::V2(Controllers { memory: true, .. }) | Kind::V1Memory
                )
            })
    }

    /// True when a pids controller enforces the task limit.
    pub fn limits_pids(&self) -> bool {
        self.limits.pids.is_some()
            && self
                .dirs
                .iter()
                .any(|(k, _)| matches!(k, Kind::V2(Controllers { pids: true, .. }) | Kind::V1Pids))
    }

    /// The files the child writes `0` (itself) into to join, built before fork (the child
    /// must not allocate).
    ///
    /// On cgroup v1 that is `tasks`, not `cgroup.procs`. Moving a thread group takes the
    /// kernel's global threadgroup lock, and taking it waits for an RCU grace period unless
    /// another move happened just before: 5 to 10 ms per server start on these machines.
    /// Moving the calling thread (`0` written to `tasks`, kernel 5.5 and later) skips the
    /// lock: 0.3 ms (docs/benchmarks.md). The two are the same move here: between fork and
    /// exec the child has one thread, and what it execs and forks stays in the cgroup. v2
    /// has no `tasks` file (and `cgroup.threads` refuses a move into another domain), so
    /// there the cost stays; `clone3` with `CLONE_INTO_CGROUP` would avoid it.
    pub fn join_files(&self) -> Vec<CString> {
        self.dirs
            .iter()
            .filter_map(|(kind, d)| {
                let file = match kind {
                    Kind::V2(_) => "cgroup.procs",
                    Kind::V1Memory | Kind::V1Pids => "tasks",
                };
                CString::new(d.join(file).as_os_str().as_bytes()).ok()
            })
            .collect()
    }

    /// The task limit's text for the agent once the tree has had a fork refused at
    /// `pids.max`, else `None`. The supervisor polls this: unlike a memory kill, a refused
    /// fork ends nothing by itself, and a server that has hit its limit is restarted.
    pub fn task_limit_hit(&self) -> Option<String> {
        self.limits_hit()
            .into_iter()
            .find(|l| l.starts_with("process limit reached"))
    }

    /// True when no process is left in the cgroup (what `rmdir` needs); an unreadable
    /// `cgroup.procs` counts as empty (the removal then says why it failed).
    pub fn is_empty(&self) -> bool {
        self.dirs.iter().all(|(_, dir)| {
            std::fs::read(dir.join("cgroup.procs")).map_or(true, |procs| procs.is_empty())
        })
    }

    /// Which limit the process tree ran into, if any, for the restart reason the agent sees.
    pub fn limits_hit(&self) -> Vec<String> {
        let mut out = Vec::new();
        let count = |dir: &Path, file: &str, key: &str| -> u64 {
            std::fs::read_to_string(dir.join(file))
                .ok()
                .and_then(|t| {
                    t.lines()
                        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().parse().unwrap_or(0)))
                })
                .unwrap_or(0)
        };
        for (kind, dir) in &self.dirs {
            let (oom, pids) = match kind {
                Kind::V2(_) => (
                    count(dir, "memory.events", "oom_kill "),
                    count(dir, "pids.events", "max "),
                ),
                Kind::V1Memory => (count(dir, "memory.oom_control", "oom_kill "), 0),
                Kind::V1Pids => (0, count(dir, "pids.events", "max ")),
            };
            if oom > 0 {
                let mb = self.limits.memory_bytes.unwrap_or(0) / (1024 * 1024);
                out.push(format!(
                    "memory limit reached ({mb} MB, sandbox.limits.memoryMb): {oom} process(es) killed"
                ));
            }
            if pids > 0 {
                out.push(format!(
                    "process limit reached ({} processes, sandbox.limits.processes): {pids} fork(s) refused",
                    self.limits.pids.unwrap_or(0)
                ));
            }
        }
        out
    }
}

impl Drop for Cgroup {
    /// Runs once the server's bwrap has been reaped. The sandbox's own processes die with it
    /// (`--die-with-parent`, PID namespace) but the kernel tears the namespace down a moment
    /// later: the gateway waits for that without blocking (`Prepared::settled`), so the
    /// first removal succeeds; where nothing waited (a drop on another path), the removal is
    /// retried for at most about 200 ms (a short, bounded block, once per server stop).
    /// Then sweeps the orphans beside it.
    fn drop(&mut self) {
        for (_, dir) in &self.dirs {
            for attempt in 0..40 {
                match std::fs::remove_dir(dir) {
                    Ok(()) => {
                        if attempt > 0 {
                            tracing::debug!(
                                "cgroup {} removed after {attempt} blocking retries",
                                dir.display()
                            );
                        }
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(_) if attempt < 39 => {
                        // Processes still inside: wait for the namespace teardown; never
                        // kill here, a caller may drop `Prepared` while the child runs.
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    Err(e) => {
                        tracing::warn!("cannot remove cgroup {}: {e}", dir.display());
                    }
                }
            }
            // A palisade killed while this one ran left its cgroups beside ours, and the
            // sweep at our creation saw it alive (or its server still dying). Sweep again
            // on the way out, so they do not wait for a palisade started after us.
            if let Some(base) = dir.parent() {
                orphans::remove_orphans(base, std::process::id());
            }
        }
    }
}

#[cfg(test)]
mod tests;
