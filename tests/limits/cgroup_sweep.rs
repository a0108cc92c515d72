//! The cgroups of killed gateways: removed by the next gateway that makes a cgroup beside
//! them, and by a running gateway as it stops. Real gateways, killed with SIGKILL.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::support::{self, Workspace};
use super::{check_says_cgroup, probe_script, ready, system_python};

/// The server cgroup directories a gateway with PID `pid` made, anywhere in the mounted
/// hierarchies (v1 memory sits below the gateway's own, nested, cgroup).
fn cgroups_of(pid: u32) -> Vec<std::path::PathBuf> {
    fn walk(dir: &Path, prefix: &str, depth: u32, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if !p.is_dir() || p.is_symlink() {
                continue;
            }
            if e.file_name().to_string_lossy().starts_with(prefix) {
                out.push(p);
            } else if depth > 0 {
                walk(&p, prefix, depth - 1, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        Path::new("/sys/fs/cgroup"),
        &format!("palisade-{pid}-"),
        4,
        &mut out,
    );
    out
}

/// How long a sweep or a start gets to show (a guard against a hang).
const SETTLE: Duration = Duration::from_secs(20);

/// A gateway serving one cgroup-limited server, for the cgroup sweep tests: started as its own
/// process so that it can be killed with SIGKILL (no destructor runs).
struct Gateway {
    child: std::process::Child,
    pid: u32,
}

impl Gateway {
    fn start(config: &Path) -> Gateway {
        let child = std::process::Command::new(support::palisade())
            .args(["serve", "--config"])
            .arg(config)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        Gateway { child, pid }
    }

    /// Waits until its server has joined its cgroup.
    fn until_contained(&self) {
        assert!(
            support::eventually(SETTLE, || !cgroups_of(self.pid).is_empty()),
            "gateway {} made no cgroup",
            self.pid
        );
        assert!(
            support::eventually(SETTLE, || !self.cgroup_procs().is_empty()),
            "gateway {}'s server never joined its cgroup",
            self.pid
        );
    }

    /// The PIDs listed in its servers' cgroups.
    fn cgroup_procs(&self) -> Vec<String> {
        cgroups_of(self.pid)
            .iter()
            .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|s| s.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .collect()
    }

    /// SIGKILLs it and waits until its server is gone from its cgroups and from /proc (reaped:
    /// until then the kernel may still count the cgroup in use, and a sweep finds it busy).
    /// Returns the cgroups it had (listed before the kill: once it is dead, a palisade of
    /// the test beside this one may sweep them at any moment).
    fn kill(mut self) -> Vec<std::path::PathBuf> {
        let server = self.cgroup_procs();
        let left = cgroups_of(self.pid);
        assert!(
            !left.is_empty(),
            "the gateway made no cgroup for its server"
        );
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        // Its server dies with it (bwrap --die-with-parent).
        assert!(
            support::eventually(SETTLE, || left
                .iter()
                .all(|d| std::fs::read_to_string(d.join("cgroup.procs"))
                    .map_or(true, |s| s.trim().is_empty()))),
            "the killed gateway's server outlived it: {left:?}"
        );
        assert!(
            support::eventually(SETTLE, || server
                .iter()
                .all(|pid| !Path::new("/proc").join(pid).exists())),
            "the killed gateway's server was never reaped: {server:?}"
        );
        left
    }

    /// Ends it the normal way (the agent closes its stdin) and asserts it removed its own.
    fn stop(mut self) {
        drop(self.child.stdin.take());
        support::raw::wait_bounded(&mut self.child);
        assert!(
            cgroups_of(self.pid).is_empty(),
            "a gateway that stops normally removes its own"
        );
    }
}

/// The config of one bwrap server under a cgroup, or `None` (said) where the test cannot run.
fn cgroup_config(ws: &Workspace) -> Option<std::path::PathBuf> {
    if !ready() {
        return None;
    }
    if !check_says_cgroup() {
        support::skip("servers get no cgroup on this machine");
        return None;
    }
    Some(ws.config(
        json!({"probe": {"command": system_python().unwrap(), "args": [probe_script()],
                         "sandbox": {"backend": "bwrap"}}}),
        json!({"sandboxPolicy": "enforce"}),
    ))
}

/// Regression: a gateway that was killed (SIGKILL: no destructor runs) left its servers'
/// cgroups behind, 151 of them on the development machine. The next gateway that makes a
/// cgroup beside them removes the ones whose palisade is gone.
#[test]
fn a_killed_gateways_cgroups_are_removed_by_the_next_one() {
    let ws = Workspace::new();
    let Some(config) = cgroup_config(&ws) else {
        return;
    };
    let first = Gateway::start(&config);
    first.until_contained();
    let first_pid = first.pid;
    first.kill();
    let second = Gateway::start(&config);
    let made = support::eventually(SETTLE, || !cgroups_of(second.pid).is_empty());
    let still = cgroups_of(first_pid);
    second.stop();
    assert!(made, "the second gateway made no cgroup");
    assert!(still.is_empty(), "left behind: {still:?}");
}

/// A gateway killed while another ran: the other's sweep at its start saw it alive, so the
/// other sweeps again as it stops, instead of leaving the orphans to a gateway after it.
#[test]
fn a_gateway_that_stops_removes_what_one_killed_meanwhile_left() {
    let ws = Workspace::new();
    let Some(config) = cgroup_config(&ws) else {
        return;
    };
    let running = Gateway::start(&config);
    running.until_contained();
    let killed = Gateway::start(&config);
    killed.until_contained();
    let killed_pid = killed.pid;
    let left = killed.kill();
    running.stop();
    let still = cgroups_of(killed_pid);
    assert!(
        still.is_empty(),
        "left behind by the killed gateway, once the other stopped: {still:?} (of {left:?})"
    );
}
