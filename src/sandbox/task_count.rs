//! Counting the tasks of a process tree through `/proc`: the task limit's last resort.
//!
//! Where no cgroup bounds a server's tasks and palisade runs as root, nothing in the kernel
//! does either: uid 0 is exempt from RLIMIT_NPROC. The supervisor then counts the tree on
//! every liveness tick and kills the server once it holds more tasks than its limit. That is
//! a watchdog, not a wall: between two ticks a fork bomb runs free.
//!
//! The walk follows `/proc/PID/task/TID/children` (every thread's children, since a child
//! belongs to the thread that forked it) from the server's own process. Inside a bubblewrap
//! sandbox that covers the whole PID namespace: an orphan is re-parented to the
//! namespace's init, which is the server process's child.

use std::collections::HashSet;
use std::path::Path;

/// Tasks (threads included) in the tree rooted at `root`, counted until `cap` is reached
/// (the walk stops there: a fork bomb's tree is not walked to its end). `None` when `root`
/// has gone.
pub fn count_tasks(root: u32, cap: u64) -> Option<u64> {
    count_tasks_in(Path::new("/proc"), root, cap)
}

fn count_tasks_in(proc: &Path, root: u32, cap: u64) -> Option<u64> {
    let mut count = 0;
    let mut seen = HashSet::new();
    let mut pending = vec![root];
    let mut first = true;
    while let Some(pid) = pending.pop() {
        if !seen.insert(pid) {
            continue; // a pid reused while we walked: never count a process twice
        }
        let Ok(tasks) = std::fs::read_dir(proc.join(pid.to_string()).join("task")) else {
            if first {
                return None;
            }
            continue; // exited while we walked
        };
        first = false;
        for task in tasks.flatten() {
            count += 1;
            if count >= cap {
                return Some(count);
            }
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            pending.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    Some(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_a_tree_of_processes_and_threads() {
        // sh forks three sleepers: the tree is sh and its three children.
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 30 & sleep 30 & sleep 30 & wait"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut seen = 0;
        for _ in 0..100 {
            seen = count_tasks(pid, 1000).unwrap();
            if seen == 4 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(seen, 4);
        // The walk stops at the cap.
        assert_eq!(count_tasks(pid, 2), Some(2));
        // This test's own process counts its threads: at least the one running it.
        assert!(count_tasks(std::process::id(), 10_000).unwrap() >= 1);
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"));
        for c in children.unwrap().split_whitespace() {
            let c = nix::unistd::Pid::from_raw(c.parse().unwrap());
            let _ = nix::sys::signal::kill(c, nix::sys::signal::Signal::SIGKILL);
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(count_tasks(pid, 1000), None, "a reaped process has no tree");
    }
}
