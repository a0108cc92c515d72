//! Cgroups a palisade that was killed (SIGKILL, an OOM kill, a test harness's timeout) left
//! behind: no destructor ran to remove them. The next palisade to make a cgroup beside them,
//! or to remove its own from beside them, removes those whose palisade is gone (named by
//! `plan::orphan_owner`). Never: remove a
//! cgroup that holds a process (rmdir refuses it) or one whose PID is alive.

use std::path::Path;

use super::plan::orphan_owner;

/// Removes the cgroups in `base` (where palisade makes or has just removed one of its own)
/// that a palisade no longer running left behind. Only empty cgroups can be removed (rmdir refuses
/// the others, and the error is ignored); one whose PID is alive again, even as another program, is
/// left alone.
pub(super) fn remove_orphans(base: &Path, me: u32) {
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
