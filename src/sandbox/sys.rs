//! The sandbox's few raw system calls, kept in one place so every `unsafe` block sits here
//! (and in `spawn`, its child module) with its `SAFETY:` line: the memfd that carries the
//! seccomp program to bwrap, the setup that runs in the child between fork and exec (no
//! descriptor but stdio and the seccomp program survives exec; resource limits; the Landlock
//! tier's restrictions, `LandlockChild`), and `spawn`, which starts a Landlock command
//! without copying this process's memory.
//!
//! Never allocates or locks in the child: only async-signal-safe syscalls run after fork.

mod notify;
mod spawn;

pub use notify::{
    channel, connect, copy_fd, mediation_available, pidfd, read_memory, recv_fd, same_fd_table,
    thread_pidfd, Listener, Notification,
};
pub use spawn::{spawn, Exec};

use std::ffi::CString;
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::sync::Arc;

use super::spec::ResourceLimits;

/// An anonymous in-memory file holding `bytes`, positioned at its start, close-on-exec (the
/// child that must read it clears the flag for itself only, see `install_child_setup`, so
/// no other child spawned meanwhile by another thread inherits it).
pub fn memfd_with(name: &std::ffi::CStr, bytes: &[u8]) -> std::io::Result<OwnedFd> {
    // SAFETY: `name` is a valid NUL-terminated string; memfd_create has no other inputs.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(owned);
    file.write_all(bytes)?;
    file.seek(SeekFrom::Start(0))?;
    Ok(OwnedFd::from(file))
}

/// Registers the child-side setup on `cmd`: mark every descriptor above stderr
/// close-on-exec, then clear the flag on `keep` (the seccomp program) only, then apply
/// `limits`. Works for `spawn` and for `exec` (which runs the same hooks in-process).
pub fn install_child_setup(
    cmd: &mut std::process::Command,
    keep: Option<RawFd>,
    limits: ResourceLimits,
) {
    let hook = move || -> std::io::Result<()> {
        cloexec_from(3)?;
        if let Some(fd) = keep {
            // SAFETY: fcntl on an integer descriptor; no memory is passed.
            if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        apply_limits(&limits)
    };
    // SAFETY: the hook only makes async-signal-safe system calls (close_range, fcntl,
    // getrlimit, setrlimit) and touches no locks or heap: it is sound between fork and exec.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Registers a second child-side hook: the child writes `0` (itself) into each cgroup file
/// of `files` (`Cgroup::join_files`), so that it and everything it forks is limited from its
/// first instruction. Failing to join fails the spawn (fail closed).
pub fn join_cgroups(cmd: &mut std::process::Command, files: Vec<CString>) {
    if files.is_empty() {
        return;
    }
    let hook = move || join_cgroups_now(&files);
    // SAFETY: the hook only makes async-signal-safe system calls (open, write, close) on
    // data prepared before fork; it neither allocates nor locks.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Writes `0` (the caller) into each cgroup file of `files`: through `cgroup.procs` (v2)
/// that moves its thread group, through `tasks` (v1) the calling thread, the same task for
/// a child between fork and exec, which has one thread. Not for a process that may have
/// started threads (an in-process exec would leave them behind on v1).
/// Async-signal-safe: open, write and close on paths built beforehand.
fn join_cgroups_now(files: &[CString]) -> std::io::Result<()> {
    for f in files {
        // SAFETY: `f` is a NUL-terminated path built before fork; open has no other input.
        let fd = unsafe { libc::open(f.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: writes one byte from a static buffer to the descriptor just opened.
        let n = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
        let e = std::io::Error::last_os_error();
        // SAFETY: closes the descriptor opened above, owned by nobody else.
        unsafe { libc::close(fd) };
        if n != 1 {
            return Err(e);
        }
    }
    Ok(())
}

/// Everything a Landlock child does between its start and its exec, prepared before it
/// starts: join its cgroups, mark every descriptor above stderr close-on-exec, lower its
/// rlimits, drop every capability (bounding set, ambient, effective/permitted/inheritable: a
/// root launcher's child keeps none, and none comes back at exec), set `no_new_privs`,
/// restrict itself with the ruleset descriptor `ruleset` (built before), then install
/// `filter` (with a listener sent to palisade on `notify_to`, when set). Any failure fails the spawn (fail closed). The same steps, in this order,
/// whichever way the child is started (`install_landlock` on a `Command`, or `spawn`).
#[derive(Debug)]
pub struct LandlockChild {
    /// The cgroup files the child writes itself into (empty: no cgroup).
    pub cgroup_joins: Vec<CString>,
    pub rlimits: ResourceLimits,
    /// The Landlock ruleset's descriptor; the launch keeps it open until the child runs.
    pub ruleset: RawFd,
    pub filter: Option<seccompiler::BpfProgram>,
    /// The child's end of the channel its seccomp listener goes to (`connect_gate`): set
    /// when the filter hands `connect` to palisade.
    pub notify_to: Option<RawFd>,
    /// Palisade runs as root: the bounding set can and must be emptied.
    pub root: bool,
}

impl LandlockChild {
    /// The child's steps. Async-signal-safe: system calls on data prepared before the child
    /// started; it neither allocates nor locks, and writes no memory but its own stack.
    pub fn apply(&self) -> std::io::Result<()> {
        join_cgroups_now(&self.cgroup_joins)?;
        cloexec_from(3)?;
        apply_limits(&self.rlimits)?;
        drop_capabilities(self.root)?;
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: landlock_restrict_self takes a descriptor and flags; no memory.
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, self.ruleset, 0u32) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(f) = &self.filter {
            let prog = libc::sock_fprog {
                len: f.len() as libc::c_ushort,
                filter: f.as_ptr() as *mut libc::sock_filter,
            };
            if let Some(sock) = self.notify_to {
                return notify::install_with_listener(&prog, sock);
            }
            const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;
            // SAFETY: `prog` points into `filter`, which `self` owns and which lives until
            // exec; seccompiler's `sock_filter` has the kernel's layout (repr(C)). The
            // kernel only reads it.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_seccomp,
                    SECCOMP_SET_MODE_FILTER,
                    0u32,
                    &prog as *const libc::sock_fprog,
                )
            };
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Registers `child`'s steps as `cmd`'s child-side hook (the `Command` way of starting a
/// Landlock command: `serve`, and `run` where `spawn` cannot be used).
pub fn install_landlock(cmd: &mut std::process::Command, child: Arc<LandlockChild>) {
    // SAFETY: `LandlockChild::apply` makes only async-signal-safe system calls (open, write,
    // close, close_range, fcntl, get/setrlimit, prctl, capset, landlock_restrict_self,
    // seccomp) on data prepared before fork; it neither allocates nor locks.
    unsafe {
        cmd.pre_exec(move || child.apply());
    }
}

/// Empties the bounding and ambient sets, then every other capability set. Without
/// CAP_SETPCAP (an unprivileged launcher) the bounding set cannot change and need not:
/// such a process has no capabilities to keep, and `no_new_privs` stops file capabilities.
fn drop_capabilities(root: bool) -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only; EINVAL on kernels without ambient sets.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                // Past the last capability this kernel knows.
                Some(libc::EINVAL) => break,
                Some(libc::EPERM) if !root => break,
                _ => return Err(e),
            }
        }
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [
        Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        },
        Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        },
    ];
    // SAFETY: capset reads the header and the two data structs, all on this stack.
    if unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Marks every descriptor >= `first` close-on-exec.
fn cloexec_from(first: u32) -> std::io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range with the CLOEXEC flag only changes descriptor flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    if r == 0 {
        return Ok(());
    }
    // Kernels before 5.11: walk the descriptor table up to the soft limit.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let top = lim.rlim_cur.min(1 << 20) as RawFd;
    for fd in first as RawFd..top {
        // SAFETY: fcntl on an integer descriptor; EBADF for closed ones is ignored.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
    Ok(())
}

fn apply_limits(l: &ResourceLimits) -> std::io::Result<()> {
    let pairs = [
        (libc::RLIMIT_DATA, l.data),
        (libc::RLIMIT_NPROC, l.processes),
        (libc::RLIMIT_NOFILE, l.open_files),
        (libc::RLIMIT_CPU, l.cpu_seconds),
    ];
    for (res, value) in pairs {
        let Some(v) = value else { continue };
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct we own.
        if unsafe { libc::getrlimit(res, &mut cur) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Only ever lower a limit: never raise the hard limit palisade itself runs under.
        let v = v as libc::rlim_t;
        // CPU: the hard limit one second above the soft one, so that the kernel's SIGXCPU at
        // the soft limit (not a bare SIGKILL at both) ends the server: its exit then says
        // which limit it was, and the gateway can tell the agent.
        let hard = if res == libc::RLIMIT_CPU {
            v.saturating_add(1)
        } else {
            v
        };
        let new = libc::rlimit {
            rlim_cur: v.min(cur.rlim_max),
            rlim_max: hard.min(cur.rlim_max),
        };
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(res, &new) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// RLIMIT_NPROC that leaves `limit` tasks to a server tree. The kernel compares the rlimit
/// with the real uid's tasks in the process's own user namespace and, for a namespace made
/// by anyone but root, with the uid's tasks on the whole host as well (root is exempt in
/// the initial namespace). So as root, in the sandbox's own namespace, `limit` is exactly
/// the sandbox's budget; for other users (and servers run without a sandbox) it is raised
/// by the tasks the user already runs, or a desktop's thousands of threads would leave a
/// server unable to start one.
pub fn nproc_fallback(limit: u64) -> u64 {
    let uid = nix::unistd::getuid();
    if uid.is_root() {
        return limit;
    }
    limit.saturating_add(tasks_of(uid.as_raw()))
}

/// Tasks (threads) the real uid `uid` runs, from `/proc/*/status`.
fn tasks_of(uid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut total = 0;
    for e in dir.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        total += status_tasks_of(&status, uid);
    }
    total
}

/// The `Threads:` of a `/proc/PID/status` whose real uid is `uid`, else 0. Pure.
fn status_tasks_of(status: &str, uid: u32) -> u64 {
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    if field("Uid:") == Some(u64::from(uid)) {
        field("Threads:").unwrap_or(1)
    } else {
        0
    }
}

/// The raw number of an owned descriptor (for rendering `--seccomp FD`).
pub fn raw(fd: &OwnedFd) -> RawFd {
    fd.as_raw_fd()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_threads_of_the_real_uid_only() {
        let mine = "Name:\tnode\nUid:\t1000\t1000\t1000\t1000\nThreads:\t11\n";
        let theirs = "Name:\tsh\nUid:\t0\t1000\t0\t0\nThreads:\t1\n";
        assert_eq!(status_tasks_of(mine, 1000), 11);
        // The real uid decides, as it does for RLIMIT_NPROC.
        assert_eq!(status_tasks_of(theirs, 1000), 0);
        assert_eq!(status_tasks_of("garbage", 1000), 0);
    }

    #[test]
    fn root_gets_the_limit_as_is() {
        if nix::unistd::getuid().is_root() {
            assert_eq!(nproc_fallback(64), 64);
        } else {
            assert!(nproc_fallback(64) > 64, "this test process itself counts");
        }
    }
}
