//! The seccomp filter every sandboxed command runs under, compiled to classic BPF (each
//! syscall's argument rules by `seccompiler`, the whole laid out as a search on the syscall
//! number by `layout`) and handed to bubblewrap (`--seccomp FD`), which installs it right
//! before it executes the command (bwrap's own setup is not filtered).
//!
//! Default allow, and a short deny list of kernel surfaces an MCP server never needs and
//! sandbox escapes keep using. Each refused call fails with EPERM (programs such as libuv
//! fall back cleanly when io_uring is refused). Pure: builds bytes, never installs a filter.
//!
//! Refused:
//! - `socket(AF_VSOCK, ...)`: talks to the hypervisor/host outside every namespace.
//! - `io_uring_setup/enter/register`: a large kernel attack surface that also bypasses
//!   filters on the syscalls it performs.
//! - `add_key`, `keyctl`, `request_key`: the kernel keyring is not namespaced.
//! - `ioctl(fd, TIOCSTI)` and `ioctl(fd, TIOCLINUX)`: typing into the terminal outside.
//! - `unshare`/`clone` with `CLONE_NEWUSER` and `clone3` (ENOSYS, so libc falls back to
//!   `clone`, whose flags can be inspected): nested user namespaces, a second line behind
//!   bwrap's `--disable-userns`.
//! - `userfaultfd`, `perf_event_open`, `bpf`, `kexec_load`, `kexec_file_load`,
//!   `init_module`, `finit_module`, `delete_module`: exploit primitives and kernel changes.
//!
//! The Landlock tier (no namespaces: the host's network and unix sockets are reachable)
//! installs the same filter itself, right before exec, with `socket()` narrowed further
//! (`Sockets::Landlock`): every family but AF_INET/AF_INET6 is refused (AF_UNIX, netlink,
//! packet, vsock, ...; `socketpair` stays allowed, runtimes use it for child stdio), and
//! AF_INET/AF_INET6 are refused entirely for a server without network (`Inet::None`), allowed
//! only as plain TCP (SOCK_STREAM, protocol 0 or IPPROTO_TCP) where Landlock governs the
//! ports (`Inet::Tcp`), or all allowed for a warn-mode server given the host network.
//! With `Inet::Tcp` two ways past Landlock's bind and connect checks are refused too:
//! `listen()` (it binds an unbound socket to an ephemeral port without a bind call: the
//! server would accept connections from the host's network) and TCP Fast Open
//! (`sendto`/`sendmsg`/`sendmmsg` with `MSG_FASTOPEN` connects without a connect call),
//! and the socket options that send a connection past its address (`SO_BINDTODEVICE` and
//! `SO_BINDTOIFINDEX`: a connect to 127.0.0.1 leaves by another interface; `IP_OPTIONS`: a
//! source route where the kernel still allows one). `Inet::Mediated` adds two: `connect()`
//! itself goes to palisade (user notification, `connect_gate`), and `seccomp()` with a new
//! listener is refused, so the server can never install a listener of its own, which would
//! decide its connects once palisade's closed.
//!
//! On x86_64 the x32 ABI numbers of the same calls are refused too (the x32 ABI reaches the
//! same kernel code through syscall numbers with bit 30 set); other architectures' ABIs are
//! killed by the architecture check seccompiler puts in front of every filter.

mod layout;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule, TargetArch,
};

/// Why no filter could be built.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp filters are not built for the {0} architecture (x86_64 and aarch64 are)")]
    UnsupportedArch(String),
    #[error("cannot compile the seccomp filter: {0}")]
    Compile(#[from] seccompiler::BackendError),
    #[error(transparent)]
    Layout(#[from] layout::LayoutError),
}

const AF_VSOCK: u64 = 40;
const AF_INET: u64 = 2;
const AF_INET6: u64 = 10;
const SOCK_STREAM: u64 = 1;
/// `type & SOCK_TYPE_MASK` (the rest are SOCK_NONBLOCK and SOCK_CLOEXEC).
const SOCK_TYPE_MASK: u64 = 0xf;
const IPPROTO_TCP: u64 = 6;
const MSG_FASTOPEN: u64 = 0x2000_0000;

/// Which `socket()` calls the filter refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sockets {
    /// Under bubblewrap: only AF_VSOCK (the private network namespace does the rest).
    Bwrap,
    /// Under Landlock: every family but AF_INET/AF_INET6, and of those what `inet` says.
    Landlock { inet: Inet },
}

/// Which internet sockets the Landlock tier's filter lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inet {
    /// None: a server without network.
    None,
    /// Plain TCP only (Landlock decides the ports), no `listen()`, no TCP Fast Open.
    Tcp,
    /// As `Tcp`, and every `connect()` is handed to palisade to decide (seccomp user
    /// notification, `connect_gate`): the address, not only the port, is checked.
    Mediated,
    /// All (the host network: a warn-mode degradation).
    Any,
}
const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;
const CLONE_NEWUSER: u64 = 0x1000_0000;
const X32_BIT: i64 = 0x4000_0000;
const X32_IOCTL: i64 = 514;
/// `SECCOMP_RET_USER_NOTIF`: the call waits for the listener's answer.
pub const RET_USER_NOTIF: u32 = 0x7fc0_0000;
/// x32's own numbers for the calls whose 64-bit numbers it cannot reach.
const X32_SENDMSG: i64 = 518;
const X32_SENDMMSG: i64 = 538;
const X32_SETSOCKOPT: i64 = 541;
/// x32's kexec_load (its 64-bit number, 246, is the 64-bit ABI's only).
const X32_KEXEC_LOAD: i64 = 528;
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER`.
const NEW_LISTENER: u64 = 8;
/// `setsockopt` levels and names that steer a connection past its address: `SO_BINDTODEVICE`
/// and `SO_BINDTOIFINDEX` (SOL_SOCKET) send a connect to 127.0.0.1 out of another interface;
/// `IP_OPTIONS` (IPPROTO_IP) can carry a source route where the kernel still allows one.
const SOL_SOCKET: u64 = 1;
const SO_BINDTODEVICE: u64 = 25;
const SO_BINDTOIFINDEX: u64 = 62;
const IPPROTO_IP: u64 = 0;
const IP_OPTIONS: u64 = 4;

/// Syscall numbers of one architecture.
struct Nr {
    socket: i64,
    connect: i64,
    setsockopt: i64,
    seccomp: i64,
    listen: i64,
    sendto: i64,
    sendmsg: i64,
    sendmmsg: i64,
    ioctl: i64,
    unshare: i64,
    clone: i64,
    clone3: i64,
    /// Refused whatever their arguments.
    always: &'static [i64],
}

// Numbers from the kernel's syscall tables (arch/x86/entry/syscalls/syscall_64.tbl and
// include/uapi/asm-generic/unistd.h); seccompiler's own tables are not public.
const X86_64: Nr = Nr {
    socket: 41,
    connect: 42,
    setsockopt: 54,
    seccomp: 317,
    listen: 50,
    sendto: 44,
    sendmsg: 46,
    sendmmsg: 307,
    ioctl: 16,
    unshare: 272,
    clone: 56,
    clone3: 435,
    // io_uring_setup, io_uring_enter, io_uring_register, add_key, request_key, keyctl,
    // userfaultfd, perf_event_open, bpf, kexec_load, kexec_file_load, init_module,
    // finit_module, delete_module
    always: &[
        425, 426, 427, 248, 249, 250, 323, 298, 321, 246, 320, 175, 313, 176,
    ],
};

const AARCH64: Nr = Nr {
    socket: 198,
    connect: 203,
    setsockopt: 208,
    seccomp: 277,
    listen: 201,
    sendto: 206,
    sendmsg: 211,
    sendmmsg: 269,
    ioctl: 29,
    unshare: 97,
    clone: 220,
    clone3: 435,
    always: &[
        425, 426, 427, 217, 218, 219, 282, 241, 280, 104, 294, 105, 273, 106,
    ],
};

fn cond(arg: u8, len: SeccompCmpArgLen, op: SeccompCmpOp, value: u64) -> SeccompCondition {
    // Arguments 0..=5 and these operators are always valid; `new` only rejects arg > 5.
    SeccompCondition::new(arg, len, op, value).unwrap_or_else(|_| unreachable!())
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, SeccompError> {
    Ok(SeccompRule::new(conds)?)
}

/// The `socket()` rules (each one a conjunction; any match is refused).
fn socket_rules(sockets: Sockets) -> Result<Vec<SeccompRule>, SeccompError> {
    use SeccompCmpArgLen::Dword;
    use SeccompCmpOp::{Eq, MaskedEq, Ne};
    let Sockets::Landlock { inet } = sockets else {
        return Ok(vec![rule(vec![cond(0, Dword, Eq, AF_VSOCK)])?]);
    };
    if inet == Inet::None {
        // Every family refused: no condition to test (a shorter program for the kernel to
        // check, JIT-compile and cache at every Landlock launch).
        return Ok(Vec::new());
    }
    // Neither AF_INET nor AF_INET6.
    let mut rules = vec![rule(vec![
        cond(0, Dword, Ne, AF_INET),
        cond(0, Dword, Ne, AF_INET6),
    ])?];
    for family in [AF_INET, AF_INET6] {
        match inet {
            // None returned above (everything refused); Any allows every internet socket.
            Inet::Any | Inet::None => continue,
            Inet::Tcp | Inet::Mediated => {}
        }
        // Any type but SOCK_STREAM (UDP, raw, SCTP's SOCK_SEQPACKET, ...).
        for ty in (0..=SOCK_TYPE_MASK).filter(|t| *t != SOCK_STREAM) {
            rules.push(rule(vec![
                cond(0, Dword, Eq, family),
                cond(1, Dword, MaskedEq(SOCK_TYPE_MASK), ty),
            ])?);
        }
        // SOCK_STREAM of another protocol than TCP (SCTP, MPTCP): Landlock governs TCP.
        rules.push(rule(vec![
            cond(0, Dword, Eq, family),
            cond(2, Dword, Ne, 0),
            cond(2, Dword, Ne, IPPROTO_TCP),
        ])?);
    }
    Ok(rules)
}

/// Builds the rules refused with EPERM for one ABI (`bias` is 0, or the x32 bit).
fn eperm_rules(
    nr: &Nr,
    bias: i64,
    sockets: Sockets,
) -> Result<BTreeMap<i64, Vec<SeccompRule>>, SeccompError> {
    use SeccompCmpArgLen::{Dword, Qword};
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &n in nr.always {
        rules.insert(n | bias, vec![]);
    }
    if bias == X32_BIT {
        rules.insert(X32_KEXEC_LOAD | bias, vec![]);
    }
    rules.insert(nr.socket | bias, socket_rules(sockets)?);
    if let Sockets::Landlock {
        inet: Inet::Tcp | Inet::Mediated,
    } = sockets
    {
        // listen() autobinds past Landlock's bind check; MSG_FASTOPEN connects past its
        // connect check. The flags are the 4th argument of sendto and sendmmsg, the 3rd of
        // sendmsg.
        rules.insert(nr.listen | bias, vec![]);
        let fastopen = |arg: u8| {
            rule(vec![cond(
                arg,
                Dword,
                SeccompCmpOp::MaskedEq(MSG_FASTOPEN),
                MSG_FASTOPEN,
            )])
        };
        let (sendmsg, sendmmsg) = if bias == X32_BIT {
            (X32_SENDMSG, X32_SENDMMSG)
        } else {
            (nr.sendmsg, nr.sendmmsg)
        };
        rules.insert(nr.sendto | bias, vec![fastopen(3)?]);
        rules.insert(sendmsg | bias, vec![fastopen(2)?]);
        rules.insert(sendmmsg | bias, vec![fastopen(3)?]);
        // Socket options that send an allowed connect somewhere else.
        let setsockopt = if bias == X32_BIT {
            X32_SETSOCKOPT
        } else {
            nr.setsockopt
        };
        let option = |level: u64, name: u64| {
            rule(vec![
                cond(1, Dword, SeccompCmpOp::Eq, level),
                cond(2, Dword, SeccompCmpOp::Eq, name),
            ])
        };
        rules.insert(
            setsockopt | bias,
            vec![
                option(SOL_SOCKET, SO_BINDTODEVICE)?,
                option(SOL_SOCKET, SO_BINDTOIFINDEX)?,
                option(IPPROTO_IP, IP_OPTIONS)?,
            ],
        );
    }
    if sockets
        == (Sockets::Landlock {
            inet: Inet::Mediated,
        })
    {
        // A filter of the server's own with a listener would take its connects over the
        // moment palisade's listener closed (palisade killed, its thread gone): the kernel
        // lets one listener exist per filter chain, and then the newest decides. Refused,
        // a connect nobody answers fails (ENOSYS).
        rules.insert(
            nr.seccomp | bias,
            vec![rule(vec![cond(
                1,
                Dword,
                SeccompCmpOp::MaskedEq(NEW_LISTENER),
                NEW_LISTENER,
            )])?],
        );
    }
    // x32 has its own number for ioctl (514), the 64-bit one is not reachable with bit 30.
    let ioctl = if bias == X32_BIT { X32_IOCTL } else { nr.ioctl };
    rules.insert(
        ioctl | bias,
        vec![
            rule(vec![cond(1, Dword, SeccompCmpOp::Eq, TIOCSTI)])?,
            rule(vec![cond(1, Dword, SeccompCmpOp::Eq, TIOCLINUX)])?,
        ],
    );
    let newuser = SeccompCmpOp::MaskedEq(CLONE_NEWUSER);
    rules.insert(
        nr.unshare | bias,
        vec![rule(vec![cond(0, Qword, newuser.clone(), CLONE_NEWUSER)])?],
    );
    rules.insert(
        nr.clone | bias,
        vec![rule(vec![cond(0, Qword, newuser, CLONE_NEWUSER)])?],
    );
    Ok(rules)
}

/// Compiles the filter for the running architecture.
pub fn program() -> Result<BpfProgram, SeccompError> {
    program_for(std::env::consts::ARCH)
}

/// Compiles the filter for `arch` (`x86_64` or `aarch64`).
pub fn program_for(arch: &str) -> Result<BpfProgram, SeccompError> {
    program_with(arch, Sockets::Bwrap)
}

/// Compiles the filter for `arch` with the given `socket()` rules.
pub fn program_with(arch: &str, sockets: Sockets) -> Result<BpfProgram, SeccompError> {
    let Syscalls { rules, fixed, .. } = syscalls(arch, sockets)?;
    // The architecture check (other ABIs are killed, as seccompiler's own prelude does),
    // then the syscall number searched for among the listed ones (`layout`).
    let audit_arch = match arch {
        "x86_64" => AUDIT_ARCH_X86_64,
        _ => AUDIT_ARCH_AARCH64,
    };
    Ok(layout::assemble(audit_arch, rules, &fixed)?)
}

/// `AUDIT_ARCH_*` of the two architectures (include/uapi/linux/audit.h), as
/// `seccomp_data.arch` carries them.
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;

/// What the filter does, per syscall number, for one architecture.
struct Syscalls {
    /// The EPERM rules per syscall number (no rule: refused whatever the arguments).
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    /// Numbers answered with a fixed action whatever their arguments, checked before the
    /// rules: ENOSYS for clone3, the user notification for a mediated `connect`.
    fixed: Vec<(i64, u32)>,
    /// seccompiler's architecture (for the reference program).
    #[cfg_attr(not(test), allow(dead_code))]
    target: TargetArch,
}

fn syscalls(arch: &str, sockets: Sockets) -> Result<Syscalls, SeccompError> {
    let (nr, target, abis): (&Nr, TargetArch, &[i64]) = match arch {
        "x86_64" => (&X86_64, TargetArch::x86_64, &[0, X32_BIT]),
        "aarch64" => (&AARCH64, TargetArch::aarch64, &[0]),
        other => return Err(SeccompError::UnsupportedArch(other.to_string())),
    };
    let mut rules = BTreeMap::new();
    for &bias in abis {
        rules.extend(eperm_rules(nr, bias, sockets)?);
    }
    // clone3 passes its flags in a struct the filter cannot read: refuse it as "not
    // implemented" so libc falls back to clone(2), which the rule above inspects.
    let mut fixed: Vec<(i64, u32)> = abis
        .iter()
        .map(|b| (nr.clone3 | b, layout::RET_ERRNO | libc::ENOSYS as u32))
        .collect();
    if sockets
        == (Sockets::Landlock {
            inet: Inet::Mediated,
        })
    {
        // connect's address sits in the caller's memory, out of a filter's reach: palisade
        // reads it and connects on the caller's behalf (`connect_gate`).
        fixed.extend(abis.iter().map(|b| (nr.connect | b, RET_USER_NOTIF)));
    }
    Ok(Syscalls {
        rules,
        fixed,
        target,
    })
}

/// The program as the bytes bwrap reads from `--seccomp FD` (an array of `sock_filter` in
/// native byte order).
pub fn to_bytes(prog: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(prog.len() * 8);
    for f in prog {
        out.extend_from_slice(&f.code.to_ne_bytes());
        out.push(f.jt);
        out.push(f.jf);
        out.extend_from_slice(&f.k.to_ne_bytes());
    }
    out
}
