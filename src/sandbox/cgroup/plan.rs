//! What a cgroup setup decides, without touching one: where this process sits
//! (`/proc/self/cgroup`), a server's directory name, which controllers a v2 cgroup hands down,
//! and what palisade must do in its own v2 cgroup first (`plan_v2`). Pure, so every case is
//! unit-tested over made-up cgroups.

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
    pub(super) fn from_list(list: &str) -> Controllers {
        let has = |c: &str| list.split_whitespace().any(|w| w == c);
        Controllers {
            memory: has("memory"),
            pids: has("pids"),
        }
    }

    pub(super) fn none(self) -> bool {
        !self.memory && !self.pids
    }

    /// Those of `self` that `other` lacks.
    pub(super) fn minus(self, other: Controllers) -> Controllers {
        Controllers {
            memory: self.memory && !other.memory,
            pids: self.pids && !other.pids,
        }
    }

    /// The `cgroup.subtree_control` line that enables them (`+memory +pids`).
    pub(super) fn enable_line(self) -> String {
        let mut v = Vec::new();
        if self.memory {
            v.push("+memory");
        }
        if self.pids {
            v.push("+pids");
        }
        v.join(" ")
    }

    pub(super) fn describe(self) -> &'static str {
        match (self.memory, self.pids) {
            (true, true) => "memory+pids",
            (true, false) => "memory only",
            (false, true) => "pids only",
            (false, false) => "none",
        }
    }
}

/// Where this process sits in each hierarchy, from `/proc/self/cgroup`. Pure.
pub(super) fn parse_self(text: &str) -> (Option<String>, Option<String>, Option<String>) {
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
pub(super) fn dir_name(server: &str, unique: u128) -> String {
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
pub(super) fn gateway_leaf(pid: u32) -> String {
    format!("palisade-{pid}-gateway")
}

/// The PID of the palisade that named a cgroup directory (`dir_name`, `gateway_leaf`), or
/// `None` for a name palisade does not make. Pure.
pub(super) fn orphan_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("palisade-")?;
    let (pid, tail) = rest.split_once('-')?;
    if tail.is_empty() || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Where server cgroups go: palisade's own cgroup, or its parent once palisade has moved
/// itself into its leaf (`/proc/self/cgroup` then names the leaf). Pure.
pub(super) fn v2_base(self_path: &str, pid: u32) -> String {
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
