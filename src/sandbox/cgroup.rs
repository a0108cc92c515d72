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
//! (it writes `0` to `cgroup.procs`, see `sys::join_cgroups`), removed when dropped. Never:
//! fail a launch because no cgroup can be made (rlimits still apply; the caller logs it),
//! move a process that is not palisade's, or remove a cgroup that still holds processes
//! (rmdir refuses, the error is ignored).
//!
//! A palisade that is killed (SIGKILL, an OOM kill, a test harness's timeout) cannot remove
//! its cgroups; the next one to create a cgroup beside them removes those whose palisade is
//! gone (`orphan_owner`, `remove_orphans`).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The limits a cgroup enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupLimits {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
}

/// The controllers a cgroup v2 hands to its children, of the two palisade uses. A host may
/// delegate one and not the other (memory but not pids, seen in containers): each limit is
/// then held by the controller that exists, the other by its rlimit fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Controllers {
    pub memory: bool,
    pub pids: bool,
}

impl Controllers {
    /// The two, as a `cgroup.controllers` / `cgroup.subtree_control` line lists them. Pure.
    fn from_list(list: &str) -> Controllers {
        let has = |c: &str| list.split_whitespace().any(|w| w == c);
        Controllers {
            memory: has("memory"),
            pids: has("pids"),
        }
    }

    fn none(self) -> bool {
        !self.memory && !self.pids
    }

    /// Those of `self` that `other` lacks.
    fn minus(self, other: Controllers) -> Controllers {
        Controllers {
            memory: self.memory && !other.memory,
            pids: self.pids && !other.pids,
        }
    }

    /// The `cgroup.subtree_control` line that enables them (`+memory +pids`).
    fn enable_line(self) -> String {
        let mut v = Vec::new();
        if self.memory {
            v.push("+memory");
        }
        if self.pids {
            v.push("+pids");
        }
        v.join(" ")
    }

    fn describe(self) -> &'static str {
        match (self.memory, self.pids) {
            (true, true) => "memory+pids",
            (true, false) => "memory only",
            (false, true) => "pids only",
            (false, false) => "none",
        }
    }
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

/// Where this process sits in each hierarchy, from `/proc/self/cgroup`. Pure.
fn parse_self(text: &str) -> (Option<String>, Option<String>, Option<String>) {
    let (mut v2, mut mem, mut pids) = (None, None, None);
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        match ctrls {
            "" => v2 = Some(path.to_string()),
            c if c.split(',').any(|x| x == "memory") => mem = Some(path.to_string()),
            c if c.split(',').any(|x| x == "pids") => pids = Some(path.to_string()),
            _ => {}
        }
    }
    (v2, mem, pids)
}

/// A directory name for `server` safe in any cgroup filesystem. Pure.
fn dir_name(server: &str, unique: u128) -> String {
    let clean: String = server
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("palisade-{}-{clean}-{unique:x}", std::process::id())
}

/// The PID of the palisade that named a cgroup directory (`dir_name`, `gateway_leaf`), or
/// `None` for a name palisade does not make. Pure.
fn orphan_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("palisade-")?;
    let (pid, tail) = rest.split_once('-')?;
    if tail.is_empty() || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Removes the cgroups beside which palisade is about to make one that a palisade no longer
/// running left behind. Only empty cgroups can be removed (rmdir refuses the others, and the
/// error is ignored); one whose PID is alive again, even as another program, is left alone.
fn remove_orphans(base: &Path, me: u32) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = orphan_owner(&name.to_string_lossy()) else {
            continue;
        };
        if pid != me && !Path::new("/proc").join(pid.to_string()).exists() {
            match std::fs::remove_dir(e.path()) {
                Ok(()) => tracing::debug!("removed {} (its palisade is gone)", e.path().display()),
                Err(err) => tracing::debug!("left {}: {err}", e.path().display()),
            }
        }
    }
}

fn write(dir: &Path, file: &str, value: &str) -> std::io::Result<()> {
    std::fs::write(dir.join(file), value)
}

/// What palisade must do in its own cgroup v2 before a server's cgroup can get the memory
/// and pids controllers; each plan names the controllers servers will get (those delegated
/// to palisade's cgroup, one or both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum V2Plan {
    /// The controllers are already enabled for children.
    Ready(Controllers),
    /// Enable them (the cgroup holds no processes, or is the root, which is exempt).
    Enable(Controllers),
    /// Move these processes (palisade and its children, nobody else) into the leaf, then
    /// enable them.
    MoveThenEnable(Vec<i32>, Controllers),
    /// Cannot: why, in words for `check` and the log.
    Unusable(String),
}

/// Decides what `create` does on cgroup v2. `controllers` and `subtree_control` are the
/// cgroup's files, `procs` its `cgroup.procs`, `ours` the processes that are palisade or its
/// descendants. Pure.
pub(crate) fn plan_v2(
    is_root: bool,
    controllers: &str,
    subtree_control: &str,
    procs: &[i32],
    ours: &[i32],
) -> V2Plan {
    let available = Controllers::from_list(controllers);
    let enabled = Controllers::from_list(subtree_control);
    if available.none() {
        return V2Plan::Unusable(
            "neither the memory nor the pids controller is available in palisade's cgroup \
             (not delegated to it)"
                .into(),
        );
    }
    if available.minus(enabled).none() {
        return V2Plan::Ready(available);
    }
    if is_root || procs.is_empty() {
        return V2Plan::Enable(available);
    }
    let strangers: Vec<i32> = procs
        .iter()
        .copied()
        .filter(|p| !ours.contains(p))
        .collect();
    if strangers.is_empty() {
        V2Plan::MoveThenEnable(procs.to_vec(), available)
    } else if !enabled.none() {
        // Enabling more is barred by the other processes, but what is enabled is usable.
        V2Plan::Ready(enabled)
    } else {
        V2Plan::Unusable(format!(
            "palisade's cgroup also holds {} other process(es) (e.g. pid {}), and cgroup v2 \
             gives no controllers to children of a cgroup with processes in it",
            strangers.len(),
            strangers[0]
        ))
    }
}

/// The leaf palisade moves itself into, named after its pid. Pure.
fn gateway_leaf(pid: u32) -> String {
    format!("palisade-{pid}-gateway")
}

/// Where server cgroups go: palisade's own cgroup, or its parent once palisade has moved
/// itself into its leaf (`/proc/self/cgroup` then names the leaf). Pure.
fn v2_base(self_path: &str, pid: u32) -> String {
    let leaf = gateway_leaf(pid);
    match self_path.rsplit_once('/') {
        Some((parent, last)) if last == leaf => {
            if parent.is_empty() {
                "/".into()
            } else {
                parent.into()
            }
        }
        _ => self_path.into(),
    }
}

/// Processes in `procs` that are `me` or descend from it (by their parent pids).
fn ours(procs: &[i32], me: i32) -> Vec<i32> {
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
fn prepare_v2(base: &Path, is_root: bool) -> std::io::Result<Controllers> {
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
            remove_orphans(base, me);
            write(base, "cgroup.subtree_control", &c.enable_line()).map(|()| c)
        }
        V2Plan::Unusable(why) => Err(std::io::Error::other(why)),
    }
}

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
                    remove_orphans(&base, std::process::id());
                    let dir = base.join(&name);
                    std::fs::create_dir(&dir)?;
                    cg.dirs.push((Kind::V2(ctrls), dir));
                }
            }
        } else {
            if let (Some(p), Some(_)) = (mem, limits.memory_bytes) {
                let base = root.join("memory").join(rel(&p));
                if base.join("memory.limit_in_bytes").exists() {
                    remove_orphans(&base, std::process::id());
                    let dir = base.join(&name);
                    std::fs::create_dir(&dir)?;
                    cg.dirs.push((Kind::V1Memory, dir));
                }
            }
            if let (Some(p), Some(_)) = (pids, limits.pids) {
                let base = root.join("pids").join(rel(&p));
                if base.join("cgroup.procs").exists() {
                    remove_orphans(&base, std::process::id());
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

    /// The `cgroup.procs` files the child writes itself into (built before fork: the child
    /// must not allocate).
    pub fn procs_files(&self) -> Vec<CString> {
        self.dirs
            .iter()
            .filter_map(|(_, d)| CString::new(d.join("cgroup.procs").as_os_str().as_bytes()).ok())
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
    /// later, so the removal is retried for at most about 200 ms (a
    /// short, bounded block, once per server stop).
    fn drop(&mut self) {
        for (_, dir) in &self.dirs {
            for attempt in 0..40 {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_v1_and_v2_paths() {
        let hybrid =
            "9:name=systemd:/\n8:pids:/a\n4:memory:/process_api/x\n1:cpu,cpuacct:/\n0::/\n";
        assert_eq!(
            parse_self(hybrid),
            (
                Some("/".into()),
                Some("/process_api/x".into()),
                Some("/a".into())
            )
        );
        assert_eq!(
            parse_self("0::/user.slice/s\n"),
            (Some("/user.slice/s".into()), None, None)
        );
    }

    const BOTH: Controllers = Controllers {
        memory: true,
        pids: true,
    };
    const MEMORY: Controllers = Controllers {
        memory: true,
        pids: false,
    };
    const PIDS: Controllers = Controllers {
        memory: false,
        pids: true,
    };

    #[test]
    fn v2_plan_moves_only_palisades_own_processes() {
        let both = "cpu memory pids";
        assert_eq!(
            plan_v2(false, both, "memory pids", &[5], &[5]),
            V2Plan::Ready(BOTH)
        );
        assert_eq!(plan_v2(false, both, "", &[], &[]), V2Plan::Enable(BOTH));
        // The root cgroup is exempt from the no-internal-processes rule.
        assert_eq!(plan_v2(true, both, "", &[1, 5], &[5]), V2Plan::Enable(BOTH));
        assert_eq!(
            plan_v2(false, both, "cpu", &[5, 6], &[5, 6]),
            V2Plan::MoveThenEnable(vec![5, 6], BOTH)
        );
        // A terminal's scope: the shell is not palisade's to move.
        let V2Plan::Unusable(why) = plan_v2(false, both, "", &[4, 5], &[5]) else {
            panic!("a shared cgroup must not be taken over");
        };
        assert!(why.contains("1 other process(es) (e.g. pid 4)"), "{why}");
        let V2Plan::Unusable(why) = plan_v2(false, "cpu io", "", &[5], &[5]) else {
            panic!("neither controller");
        };
        assert!(why.contains("not delegated"), "{why}");
    }

    // Regression (first contact #10): on a v2 host delegating `memory` but not `pids`, every
    // cgroup limit was dropped ("RLIMITS ONLY"). The controllers that exist are used.
    #[test]
    fn v2_plan_uses_the_controllers_that_are_delegated() {
        assert_eq!(
            plan_v2(false, "cpu memory", "", &[5], &[5]),
            V2Plan::MoveThenEnable(vec![5], MEMORY)
        );
        assert_eq!(plan_v2(false, "pids", "", &[], &[]), V2Plan::Enable(PIDS));
        assert_eq!(
            plan_v2(false, "cpu memory", "memory", &[], &[]),
            V2Plan::Ready(MEMORY)
        );
        // Others in the cgroup bar enabling pids, but memory already is enabled.
        assert_eq!(
            plan_v2(false, "memory pids", "memory", &[4, 5], &[5]),
            V2Plan::Ready(MEMORY)
        );
    }

    /// A fixture cgroup v2 hierarchy: palisade (pid-less: no processes listed) sits in
    /// `/svc`, whose parent delegates `delegated`.
    fn fixture_v2(delegated: &str) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let svc = t.path().join("svc");
        std::fs::create_dir_all(&svc).unwrap();
        std::fs::write(t.path().join("cgroup.controllers"), delegated).unwrap();
        std::fs::write(svc.join("cgroup.controllers"), delegated).unwrap();
        std::fs::write(svc.join("cgroup.subtree_control"), "").unwrap();
        std::fs::write(svc.join("cgroup.procs"), "").unwrap();
        t
    }

    #[test]
    fn partial_delegation_holds_each_limit_with_the_controller_that_exists() {
        let limits = CgroupLimits {
            memory_bytes: Some(256 << 20),
            pids: Some(64),
        };
        for (delegated, memory, pids) in [
            ("cpu memory pids", true, true),
            ("cpu memory", true, false),
            ("pids", false, true),
        ] {
            let t = fixture_v2(delegated);
            let cg = Cgroup::create_in(t.path(), "0::/svc\n", "fs", limits)
                .unwrap()
                .unwrap_or_else(|| panic!("{delegated}: no cgroup"));
            assert_eq!(cg.limits_memory(), memory, "{delegated}");
            assert_eq!(cg.limits_pids(), pids, "{delegated}");
            let dir = &cg.dirs[0].1;
            assert_eq!(dir.join("memory.max").exists(), memory, "{delegated}");
            assert_eq!(dir.join("pids.max").exists(), pids, "{delegated}");
            let enabled =
                std::fs::read_to_string(t.path().join("svc/cgroup.subtree_control")).unwrap();
            assert_eq!(
                enabled.contains("+memory"),
                memory,
                "{delegated}: {enabled}"
            );
            assert_eq!(enabled.contains("+pids"), pids, "{delegated}: {enabled}");
            // The fixture's files are not cgroupfs: clear them so the drop's rmdir works.
            for f in ["memory.max", "memory.swap.max", "pids.max"] {
                let _ = std::fs::remove_file(dir.join(f));
            }
        }
        // Neither delegated: no cgroup, and the reason says why.
        let t = fixture_v2("cpu io");
        let err = Cgroup::create_in(t.path(), "0::/svc\n", "fs", limits).unwrap_err();
        assert!(err.to_string().contains("not delegated"), "{err}");
        // Only pids delegated and only a memory limit asked: no cgroup is made at all.
        let t = fixture_v2("pids");
        let only_memory = CgroupLimits {
            memory_bytes: Some(1 << 30),
            pids: None,
        };
        assert!(Cgroup::create_in(t.path(), "0::/svc\n", "fs", only_memory)
            .unwrap()
            .is_none());
    }

    #[test]
    fn server_cgroups_go_beside_the_gateway_leaf() {
        assert_eq!(
            v2_base("/system.slice/p.service", 42),
            "/system.slice/p.service"
        );
        assert_eq!(
            v2_base("/system.slice/p.service/palisade-42-gateway", 42),
            "/system.slice/p.service"
        );
        // Another palisade's leaf is not ours.
        assert_eq!(
            v2_base("/s/palisade-7-gateway", 42),
            "/s/palisade-7-gateway"
        );
        assert_eq!(v2_base("/palisade-42-gateway", 42), "/");
    }

    #[test]
    fn orphans_are_known_by_the_name_palisade_gave_them() {
        assert_eq!(
            orphan_owner("palisade-8505-fs-18eb7be9f70e58e2"),
            Some(8505)
        );
        assert_eq!(orphan_owner(&dir_name("a b", 7)), Some(std::process::id()));
        assert_eq!(orphan_owner(&gateway_leaf(42)), Some(42));
        for other in [
            "palisade-",
            "palisade-12",
            "palisade-12-",
            "palisade-x1-fs",
            "system.slice",
            "palisade--fs",
        ] {
            assert_eq!(orphan_owner(other), None, "{other}");
        }
    }

    /// A killed palisade's cgroups go when the next one makes a cgroup beside them; a live
    /// palisade's, this one's, and anything not named by palisade stay.
    #[test]
    fn a_dead_palisades_cgroups_are_removed_beside_a_new_one() {
        let base = tempfile::tempdir().unwrap();
        let dead = {
            let mut c = std::process::Command::new("true").spawn().unwrap();
            c.wait().unwrap();
            c.id()
        };
        let me = std::process::id();
        let live = std::os::unix::process::parent_id();
        let orphan = base.path().join(format!("palisade-{dead}-fs-1"));
        let busy = base.path().join(format!("palisade-{dead}-fs-2"));
        let kept = [
            base.path().join(format!("palisade-{me}-fs-3")),
            base.path().join(format!("palisade-{live}-fs-4")),
            base.path().join("user.slice"),
        ];
        for d in kept.iter().chain([&orphan, &busy]) {
            std::fs::create_dir(d).unwrap();
        }
        // Stands in for a cgroup that still holds a process: rmdir refuses it.
        std::fs::write(busy.join("cgroup.procs"), "1").unwrap();
        remove_orphans(base.path(), me);
        assert!(!orphan.exists());
        assert!(busy.exists());
        for d in &kept {
            assert!(d.exists(), "{}", d.display());
        }
    }

    #[test]
    fn names_are_safe_directory_names() {
        let n = dir_name("../evil/name with space", 255);
        assert!(
            !n.contains('/') && !n.contains(' ') && !n.contains(".."),
            "{n}"
        );
        assert!(n.ends_with("-ff"), "{n}");
    }
}
