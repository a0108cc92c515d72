//! The raw calls of connect mediation (`sandbox::connect_gate`): the channel on which a
//! Landlock child hands its seccomp listener to palisade, the child's half of that hand-over
//! (async-signal-safe: it runs between fork and exec), and the listener's side: wait, receive
//! a notification, check it is still pending, read the caller's memory, take a copy of its
//! socket, connect it, answer.
//!
//! Why a copy of the socket: the address a caller passed lives in memory the caller can
//! rewrite after palisade has read it, so letting the kernel continue the call would connect
//! to whatever is there by then. Palisade connects its own copy (the same open socket) to the
//! address it read and checked, and answers the call with that result.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A connected pair of `SOCK_SEQPACKET` unix sockets, both close-on-exec: palisade's end and
/// the child's (the child sends the listener on it before it execs).
pub fn channel() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: socketpair writes two descriptors into the array we own.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `CMSG_SPACE(sizeof(int))` on 64-bit Linux, in a buffer aligned for `cmsghdr`.
#[repr(C, align(8))]
struct FdControl([u8; 24]);

/// The one data byte of a descriptor-passing message.
fn one_byte(byte: &mut [u8; 1]) -> libc::iovec {
    libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    }
}

/// A message of the byte `iov` points at, with room in `control` for one descriptor. It
/// points into both: they must outlive it. Async-signal-safe (no allocation).
fn fd_message(iov: &mut libc::iovec, control: &mut FdControl) -> libc::msghdr {
    // SAFETY: msghdr is plain data; zero is a valid value for each field.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = control.0.len();
    msg
}

/// The child's half: sends `fd` over `sock` (SCM_RIGHTS). Async-signal-safe: builds the
/// message on its own stack and makes one system call.
pub(super) fn send_fd(sock: RawFd, fd: RawFd) -> io::Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = one_byte(&mut byte);
    let mut control = FdControl([0; 24]);
    let msg = fd_message(&mut iov, &mut control);
    // SAFETY: the control buffer is CMSG_SPACE(sizeof(int)) bytes, aligned, so the first
    // header and its data fit; CMSG_* only compute addresses inside it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
    }
    // SAFETY: `msg` points at the iovec and control buffer on this stack.
    if unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) } != 1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Palisade's half: the descriptor the child sent on `sock`, close-on-exec; `None` when the
/// child's end closed without sending one (the child never got that far).
pub fn recv_fd(sock: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = one_byte(&mut byte);
    let mut control = FdControl([0; 24]);
    let mut msg = fd_message(&mut iov, &mut control);
    let n = loop {
        // SAFETY: `msg` points at buffers on this stack; the kernel writes into them.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    if n == 0 {
        return Ok(None);
    }
    // SAFETY: the kernel filled `msg`; CMSG_FIRSTHDR returns null or a header inside the
    // control buffer, whose data holds one descriptor when it is SCM_RIGHTS of that length.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
            || (*cmsg).cmsg_len < libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize
        {
            return Ok(None);
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
        Ok(Some(OwnedFd::from_raw_fd(fd)))
    }
}

/// Installs `prog` as the caller's seccomp filter with a listener (the filter must already
/// be allowed: `no_new_privs` set), waits killable once palisade has read a notification
/// where the kernel can (5.19: a signal no longer interrupts a connect palisade is doing),
/// and sends the listener over `sock`, then closes it here. Async-signal-safe.
pub(super) fn install_with_listener(prog: &libc::sock_fprog, sock: RawFd) -> io::Result<()> {
    const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;
    let listener = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as libc::c_uint;
    let killable = libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV as libc::c_uint;
    let install = |flags: libc::c_uint| {
        // SAFETY: `prog` points at a program the caller owns until exec; the kernel only
        // reads it.
        unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                SECCOMP_SET_MODE_FILTER,
                flags,
                prog as *const libc::sock_fprog,
            )
        }
    };
    let mut fd = install(listener | killable);
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // A kernel before 5.19 does not know the killable wait.
        fd = install(listener);
    }
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = fd as RawFd;
    let sent = send_fd(sock, fd);
    // SAFETY: closes the listener this call created; palisade holds its own copy now. The
    // server must never keep one: it could answer its own connects.
    unsafe { libc::close(fd) };
    sent
}

/// A seccomp listener: the notifications of one sandboxed process tree.
pub struct Listener(OwnedFd);

/// One intercepted system call.
#[derive(Debug, Clone, Copy)]
pub struct Notification {
    pub id: u64,
    /// The calling thread, in palisade's PID namespace.
    pub pid: u32,
    /// The call's arguments (the filter notifies `connect` only: fd, address, length).
    pub args: [u64; 6],
}

impl Listener {
    pub fn new(fd: OwnedFd) -> Listener {
        Listener(fd)
    }

    /// Waits for a notification: `true` when one is ready, `false` once every process
    /// under the filter has ended.
    pub fn wait(&self) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: poll reads and writes the one pollfd we own.
            let r = unsafe { libc::poll(&mut pfd, 1, -1) };
            if r > 0 {
                return Ok(pfd.revents & libc::POLLIN != 0);
            }
            let e = io::Error::last_os_error();
            if r < 0 && e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// The next notification (after `wait` said one is ready). ENOENT: its caller is gone.
    pub fn recv(&self) -> io::Result<Notification> {
        // SAFETY: seccomp_notif is plain data; the kernel requires it zeroed.
        let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: the ioctl writes one seccomp_notif into `n`.
        if unsafe { libc::ioctl(self.0.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, &mut n) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Notification {
            id: n.id,
            pid: n.pid,
            args: n.data.args,
        })
    }

    /// Whether notification `id` still waits for its answer (its caller still in the call,
    /// so its pid still names it).
    pub fn pending(&self, id: u64) -> bool {
        let mut id = id;
        // SAFETY: the ioctl reads one u64 we own.
        unsafe {
            libc::ioctl(
                self.0.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                &mut id,
            ) == 0
        }
    }

    /// Answers notification `id`: the call returns `Ok(value)` or fails with `Err(errno)`.
    /// An answer to a caller gone meanwhile (ENOENT) is not an error.
    pub fn answer(&self, id: u64, result: Result<i64, i32>) -> io::Result<()> {
        let (val, error) = match result {
            Ok(v) => (v, 0),
            Err(errno) => (0, -errno),
        };
        let mut resp = libc::seccomp_notif_resp {
            id,
            val,
            error,
            flags: 0,
        };
        // SAFETY: the ioctl reads one seccomp_notif_resp we own.
        if unsafe {
            libc::ioctl(
                self.0.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &mut resp,
            )
        } != 0
        {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOENT) {
                return Err(e);
            }
        }
        Ok(())
    }
}

/// `len` bytes of process `pid`'s memory at `addr` (ptrace access rules apply: palisade
/// started the process, so it may).
pub fn read_memory(pid: u32, addr: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    if len == 0 {
        return Ok(buf);
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: the local iovec covers `buf`, which we own; the remote one is only read
    // through the kernel, which checks it.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != len {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(buf)
}

/// A pidfd for process `pid` (a thread group leader).
pub fn pidfd(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0u32) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A pidfd for thread `tid` itself (`PIDFD_THREAD`, Linux 6.9): descriptors taken through it
/// come from that thread's table. EINVAL on older kernels.
pub fn thread_pidfd(tid: u32) -> io::Result<OwnedFd> {
    const PIDFD_THREAD: u32 = libc::O_EXCL as u32;
    // SAFETY: pidfd_open takes a pid and flags.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid as libc::pid_t, PIDFD_THREAD) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Whether threads `a` and `b` share one descriptor table (`kcmp`); `None` when `kcmp` is
/// refused (a seccomp profile) or fails.
pub fn same_fd_table(a: u32, b: u32) -> Option<bool> {
    const KCMP_FILES: libc::c_int = 2;
    // SAFETY: kcmp compares two tasks' kernel objects; it takes integers only.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            a as libc::pid_t,
            b as libc::pid_t,
            KCMP_FILES,
            0,
            0,
        )
    };
    (r >= 0).then_some(r == 0)
}

/// Palisade's own copy of descriptor `fd` of the process behind `pidfd` (close-on-exec).
pub fn copy_fd(pidfd: &OwnedFd, fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_getfd takes two descriptors numbers and flags.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0u32) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// Connects `sock` to `addr`; a non-blocking socket's EINPROGRESS is an `Err` like any other.
pub fn connect(sock: &OwnedFd, addr: &SocketAddr) -> io::Result<()> {
    // SAFETY: sockaddr_storage is plain data; zero is valid.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage, which is aligned for it.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage, which is aligned for it.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    loop {
        // SAFETY: `storage` holds a sockaddr of `len` bytes.
        let r = unsafe {
            libc::connect(
                sock.as_raw_fd(),
                (&storage as *const libc::sockaddr_storage).cast(),
                len as libc::socklen_t,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Whether this kernel, under whatever surrounds palisade, can mediate connects: the
/// user-notification action exists; `pidfd_open`, `pidfd_getfd` and `process_vm_readv` are
/// not refused (each is called so that it fails on its arguments: EINVAL or EBADF from the
/// call itself, not a profile's EPERM or ENOSYS); Yama lets palisade read its children. And
/// where palisade itself runs under a seccomp filter (a container, another sandbox), which
/// may hold a listener of its own (a second one is refused: EBUSY) or refuse what the checks
/// need, the whole hand-over is tried once on a forked child.
pub fn mediation_available() -> bool {
    const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;
    let action: u32 = libc::SECCOMP_RET_USER_NOTIF;
    // SAFETY: the kernel reads one u32 we own.
    let notif = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0u32,
            &action as *const u32,
        )
    } == 0;
    let fails_with = |r: libc::c_long, want: i32| {
        r < 0 && io::Error::last_os_error().raw_os_error() == Some(want)
    };
    // SAFETY: each call gets an invalid argument and fails on it without side effects.
    let (open, getfd, readv) = unsafe {
        (
            fails_with(libc::syscall(libc::SYS_pidfd_open, 0, 0u32), libc::EINVAL),
            fails_with(
                libc::syscall(libc::SYS_pidfd_getfd, -1, 0, 0u32),
                libc::EBADF,
            ),
            fails_with(
                libc::process_vm_readv(0, std::ptr::null(), 0, std::ptr::null(), 0, 1)
                    as libc::c_long,
                libc::EINVAL,
            ),
        )
    };
    if !(notif && open && getfd && readv) {
        return false;
    }
    // The calling thread's filters are the ones a fork (and so a launch) copies.
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
    };
    if !yama_allows(field("CapEff:")) {
        return false;
    }
    let filtered = field("Seccomp:").is_none_or(|v| v != "0");
    !filtered || trial_hand_over()
}

/// Yama's `ptrace_scope` (absent: no Yama): 3 lets no one read another process's memory, 2
/// only a palisade with CAP_SYS_PTRACE in its effective set (`cap_eff`, hex, from
/// `/proc/thread-self/status`).
fn yama_allows(cap_eff: Option<&str>) -> bool {
    const CAP_SYS_PTRACE: u32 = 19;
    match std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope") {
        Ok(v) => match v.trim() {
            "3" => false,
            "2" => cap_eff
                .and_then(|c| u64::from_str_radix(c, 16).ok())
                .is_some_and(|c| c & (1 << CAP_SYS_PTRACE) != 0),
            _ => true,
        },
        Err(_) => true,
    }
}

/// A value for the trial to read from its child's memory.
static TRIAL_WORD: u64 = 0x5041_4c49_5341_4445;

/// Forks a child that installs an allow-all filter with a listener (as a Landlock child
/// does), then takes a descriptor of it and reads its memory as the gate would.
fn trial_hand_over() -> bool {
    const ALLOW: [libc::sock_filter; 1] = [libc::sock_filter {
        code: 0x06,
        jt: 0,
        jf: 0,
        k: 0x7fff_0000,
    }];
    let Ok((ours, theirs)) = channel() else {
        return false;
    };
    let (ours_raw, theirs_raw) = (ours.as_raw_fd(), theirs.as_raw_fd());
    // SAFETY: the child makes only async-signal-safe system calls on data built before the
    // fork (the filter is a constant) and ends with _exit; the parent reaps it below.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return false;
    }
    if pid == 0 {
        // SAFETY: raw system calls in the forked child, then _exit.
        unsafe {
            libc::close(ours_raw);
            let prog = libc::sock_fprog {
                len: 1,
                filter: ALLOW.as_ptr() as *mut libc::sock_filter,
            };
            let ok = libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
                && libc::syscall(
                    libc::SYS_seccomp,
                    1u32,
                    libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32,
                    &prog,
                ) >= 0;
            let byte = [u8::from(ok)];
            libc::write(theirs_raw, byte.as_ptr().cast(), 1);
            // Until the parent, done with this process, kills it.
            loop {
                libc::pause();
            }
        }
    }
    drop(theirs);
    // The child's verdict, within a bound: an outer listener could hold its seccomp call.
    let mut pfd = libc::pollfd {
        fd: ours_raw,
        events: libc::POLLIN,
        revents: 0,
    };
    let mut byte = [0u8; 1];
    // SAFETY: poll reads and writes the one pollfd we own; read writes one byte into ours.
    let installed = unsafe {
        libc::poll(&mut pfd, 1, 2000) == 1 && libc::read(ours_raw, byte.as_mut_ptr().cast(), 1) == 1
    } && byte[0] == 1;
    let taken = installed
        && pidfd(pid as u32).is_ok_and(|p| copy_fd(&p, theirs_raw).is_ok())
        && read_memory(pid as u32, &TRIAL_WORD as *const u64 as u64, 8)
            .is_ok_and(|b| b == TRIAL_WORD.to_ne_bytes());
    drop(ours);
    // Killed rather than told: it may hold copies of other descriptors (another probe's
    // channel) whose closing it would otherwise wait for.
    // SAFETY: signals and reaps the child forked above.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) < 0
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {}
    }
    taken
}
