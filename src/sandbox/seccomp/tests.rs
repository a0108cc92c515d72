//! The filter's tests: what it refuses, and that the searched layout decides every input as
//! seccompiler's chain did (a small classic-BPF interpreter runs both).

use super::reference::{chain_program, ARCH_CHECK_LEN};
use super::*;
use seccompiler::{sock_filter, SeccompAction, SeccompFilter};

const AUDIT_ARCH_I386: u32 = 0x4000_0003;

const ALL_SOCKETS: [Sockets; 5] = [
    Sockets::Bwrap,
    Sockets::Landlock { inet: Inet::None },
    Sockets::Landlock { inet: Inet::Tcp },
    Sockets::Landlock {
        inet: Inet::Mediated,
    },
    Sockets::Landlock { inet: Inet::Any },
];

/// `struct seccomp_data` as the filter reads it.
struct Data {
    nr: u32,
    arch: u32,
    args: [u64; 6],
}

/// The 32-bit word at offset `k` of `d` (little-endian halves for the 64-bit arguments).
fn word(d: &Data, k: u32) -> u32 {
    match k {
        0 => d.nr,
        4 => d.arch,
        8 | 12 => 0,
        16..=60 if k.is_multiple_of(4) => {
            let a = d.args[((k - 16) / 8) as usize];
            if (k - 16).is_multiple_of(8) {
                a as u32
            } else {
                (a >> 32) as u32
            }
        }
        _ => panic!("load from offset {k}"),
    }
}

/// Runs a classic BPF program as the kernel does: the action and the instructions run.
fn run(prog: &[sock_filter], d: &Data) -> (u32, usize) {
    let (mut a, mut pc, mut steps) = (0u32, 0usize, 0usize);
    loop {
        let i = &prog[pc];
        steps += 1;
        pc += 1;
        let jump = |taken: bool| usize::from(if taken { i.jt } else { i.jf });
        match i.code {
            0x20 => a = word(d, i.k),
            0x54 => a &= i.k,
            0x05 => pc += i.k as usize,
            0x15 => pc += jump(a == i.k),
            0x25 => pc += jump(a > i.k),
            0x35 => pc += jump(a >= i.k),
            0x45 => pc += jump(a & i.k != 0),
            0x06 => return (i.k, steps),
            other => panic!("instruction {other:#x} at {}", pc - 1),
        }
    }
}

/// Argument values that exercise every condition of the filter (families, socket types
/// with flags, protocols, ioctl requests, clone flags, MSG_FASTOPEN, high words).
const VALUES: [u64; 15] = [
    0,
    1,
    2,
    6,
    10,
    17,
    40,
    0x8_0801,
    0x5412,
    0x541c,
    0x1000_0011,
    0x2000_0040,
    0x1_0000_0002,
    0x1_0000_5412,
    u64::MAX,
];

fn numbers() -> Vec<u32> {
    let mut nrs: Vec<u32> = (0..=600).collect();
    nrs.extend((0..=600).map(|n| n | X32_BIT as u32));
    nrs.extend([0x3fff_ffff, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff]);
    nrs
}

#[test]
fn the_search_decides_every_input_as_the_chain_did() {
    for (arch, own) in [
        ("x86_64", AUDIT_ARCH_X86_64),
        ("aarch64", AUDIT_ARCH_AARCH64),
    ] {
        for sockets in ALL_SOCKETS {
            let new = program_with(arch, sockets).unwrap();
            let old = chain_program(arch, sockets).unwrap();
            let Syscalls { rules, fixed, .. } = syscalls(arch, sockets).unwrap();
            let keyed = |nr: u32| {
                fixed
                    .iter()
                    .map(|(k, _)| k)
                    .chain(rules.keys())
                    .any(|k| *k as u32 == nr)
            };
            let mut checked = 0u64;
            for nr in numbers() {
                for a in [
                    own,
                    AUDIT_ARCH_I386,
                    AUDIT_ARCH_X86_64 ^ AUDIT_ARCH_AARCH64 ^ own,
                    0,
                ] {
                    let sets: Vec<[u64; 6]> = if keyed(nr) && a == own {
                        let mut v = Vec::new();
                        for x in VALUES {
                            for y in VALUES {
                                for z in VALUES {
                                    for w in [0, 0x2000_0000, 0x1_0000_0000] {
                                        v.push([x, y, z, w, x, y]);
                                    }
                                }
                            }
                        }
                        v
                    } else {
                        VALUES.iter().map(|x| [*x; 6]).collect()
                    };
                    for args in sets {
                        let d = Data { nr, arch: a, args };
                        let (got, want) = (run(&new, &d).0, run(&old, &d).0);
                        assert_eq!(
                            got, want,
                            "{arch} {sockets:?}: nr {nr:#x} arch {a:#x} args {args:x?}"
                        );
                        checked += 1;
                    }
                }
            }
            assert!(checked > 100_000, "{checked}");
        }
    }
}

#[test]
fn an_allowed_syscall_is_decided_in_a_few_instructions() {
    // The kernel runs the filter once per native syscall number at every launch to cache
    // the always-allowed ones; the chain walked past every listed syscall for each.
    for arch in ["x86_64", "aarch64"] {
        let own = if arch == "x86_64" {
            AUDIT_ARCH_X86_64
        } else {
            AUDIT_ARCH_AARCH64
        };
        for sockets in ALL_SOCKETS {
            let new = program_with(arch, sockets).unwrap();
            let old = chain_program(arch, sockets).unwrap();
            let steps = |p: &[sock_filter]| {
                (0..=600)
                    .map(|nr| {
                        let d = Data {
                            nr,
                            arch: own,
                            args: [0; 6],
                        };
                        run(p, &d)
                    })
                    .filter(|(action, _)| *action == layout::RET_ALLOW)
                    .map(|(_, s)| s)
                    .sum::<usize>()
            };
            let (new_steps, old_steps) = (steps(&new), steps(&old));
            assert!(
                new_steps * 4 < old_steps,
                "{arch} {sockets:?}: {new_steps} steps against {old_steps}"
            );
            assert!(
                new.len() <= old.len(),
                "{arch} {sockets:?}: {} against {}",
                new.len(),
                old.len()
            );
        }
    }
}

#[test]
fn the_kernel_loads_the_program_and_it_refuses_what_it_lists() {
    // A child of this test installs each variant and tries a refused and an allowed call.
    for sockets in ALL_SOCKETS {
        let prog = program_with(std::env::consts::ARCH, sockets).unwrap();
        let fprog = libc::sock_fprog {
            len: prog.len() as libc::c_ushort,
            filter: prog.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: the child makes system calls only (no allocation, no lock) and ends with
        // _exit; the parent waits for it.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: raw system calls on data built before the fork.
            unsafe {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    libc::_exit(10);
                }
                if libc::syscall(libc::SYS_seccomp, 1u32, 0u32, &fprog) != 0 {
                    libc::_exit(11);
                }
                let vsock = libc::socket(40, libc::SOCK_STREAM, 0);
                if vsock >= 0 || *libc::__errno_location() != libc::EPERM {
                    libc::_exit(12);
                }
                if libc::syscall(libc::SYS_clone3, 0usize, 0usize) != -1
                    || *libc::__errno_location() != libc::ENOSYS
                {
                    libc::_exit(13);
                }
                if libc::syscall(libc::SYS_io_uring_setup, 1u32, 0usize) != -1
                    || *libc::__errno_location() != libc::EPERM
                {
                    libc::_exit(14);
                }
                if libc::getppid() <= 0 {
                    libc::_exit(15);
                }
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "{sockets:?}: {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "{sockets:?}");
    }
}

#[test]
fn builds_for_x86_64_and_aarch64_and_refuses_others() {
    assert!(program_for("x86_64").unwrap().len() > 20);
    assert!(program_for("aarch64").unwrap().len() > 20);
    assert!(matches!(
        program_for("mips"),
        Err(SeccompError::UnsupportedArch(_))
    ));
}

#[test]
fn the_program_starts_with_seccompilers_architecture_check() {
    // seccompiler's prelude: load arch, jump if equal, kill; ours is the same, then loads
    // the syscall number.
    for (arch, target) in [
        ("x86_64", TargetArch::x86_64),
        ("aarch64", TargetArch::aarch64),
    ] {
        let plain: BpfProgram = SeccompFilter::new(
            BTreeMap::new(),
            SeccompAction::Allow,
            SeccompAction::Errno(1),
            target,
        )
        .unwrap()
        .try_into()
        .unwrap();
        assert_eq!(plain[0].code, 0x20); // ld arch
        assert_eq!(plain[0].k, 4); // offsetof(seccomp_data, arch)
        assert_eq!(plain[1].code, 0x15); // jeq
        assert_eq!(plain[2].code, 0x06); // ret (kill)
        let prog = program_for(arch).unwrap();
        assert_eq!(prog[..ARCH_CHECK_LEN], plain[..ARCH_CHECK_LEN], "{arch}");
        assert_eq!(prog[3].code, 0x20);
        assert_eq!(prog[3].k, 0); // ld nr
    }
    let prog = program_for("x86_64").unwrap();
    let d = |nr| Data {
        nr,
        arch: AUDIT_ARCH_X86_64,
        args: [0; 6],
    };
    let enosys = 0x0005_0000 | libc::ENOSYS as u32;
    assert_eq!(run(&prog, &d(435)).0, enosys, "clone3");
    assert_eq!(run(&prog, &d(435 | X32_BIT as u32)).0, enosys, "x32 clone3");
    let i386 = Data {
        nr: 39,
        arch: AUDIT_ARCH_I386,
        args: [0; 6],
    };
    assert_eq!(
        run(&prog, &i386).0,
        0x8000_0000,
        "another architecture is killed"
    );
}

#[test]
fn plain_tcp_also_refuses_listen_and_fast_open_on_both_architectures() {
    let tcp = Sockets::Landlock { inet: Inet::Tcp };
    for (arch, own, listen, sendto) in [
        ("x86_64", AUDIT_ARCH_X86_64, 50u32, 44u32),
        ("aarch64", AUDIT_ARCH_AARCH64, 201, 206),
    ] {
        let decide = |prog: &[sock_filter], nr: u32, args: [u64; 6]| {
            run(
                prog,
                &Data {
                    nr,
                    arch: own,
                    args,
                },
            )
            .0
        };
        let eperm = 0x0005_0000 | 1;
        let fastopen = [3, 0, 0, MSG_FASTOPEN, 0, 0];
        let prog = program_with(arch, tcp).unwrap();
        assert_eq!(
            decide(&prog, listen, [3, 1, 0, 0, 0, 0]),
            eperm,
            "{arch}: listen"
        );
        assert_eq!(
            decide(&prog, sendto, fastopen),
            eperm,
            "{arch}: MSG_FASTOPEN"
        );
        assert_eq!(
            decide(&prog, sendto, [3, 0, 0, 0, 0, 0]),
            layout::RET_ALLOW,
            "{arch}"
        );
        // Without TCP (no internet socket at all) neither rule is needed.
        let none = program_with(arch, Sockets::Landlock { inet: Inet::None }).unwrap();
        assert_eq!(
            decide(&none, listen, [3, 1, 0, 0, 0, 0]),
            layout::RET_ALLOW,
            "{arch}"
        );
        assert_eq!(decide(&none, sendto, fastopen), layout::RET_ALLOW, "{arch}");
    }
}

#[test]
fn only_the_mediated_variant_hands_connect_to_palisade_on_both_architectures() {
    let mediated = Sockets::Landlock {
        inet: Inet::Mediated,
    };
    for (arch, own, connect, listen) in [
        ("x86_64", AUDIT_ARCH_X86_64, 42u32, 50u32),
        ("aarch64", AUDIT_ARCH_AARCH64, 203, 201),
    ] {
        let call = |nr: u32| Data {
            nr,
            arch: own,
            args: [3, 0x7fff_0000, 16, 0, 0, 0],
        };
        let prog = program_with(arch, mediated).unwrap();
        assert_eq!(run(&prog, &call(connect)).0, RET_USER_NOTIF, "{arch}");
        // Still plain TCP's rules: listen refused.
        assert_eq!(run(&prog, &call(listen)).0, 0x0005_0000 | 1, "{arch}");
        for other in [Inet::Tcp, Inet::Any, Inet::None] {
            let prog = program_with(arch, Sockets::Landlock { inet: other }).unwrap();
            assert_eq!(
                run(&prog, &call(connect)).0,
                layout::RET_ALLOW,
                "{arch} {other:?}"
            );
        }
    }
    // The server's own listener, and the options that steer a connection, refused.
    for (arch, own, seccomp, setsockopt) in [
        ("x86_64", AUDIT_ARCH_X86_64, 317u32, 54u32),
        ("aarch64", AUDIT_ARCH_AARCH64, 277, 208),
    ] {
        let prog = program_with(arch, mediated).unwrap();
        let call = |nr: u32, args: [u64; 6]| {
            run(
                &prog,
                &Data {
                    nr,
                    arch: own,
                    args,
                },
            )
            .0
        };
        let eperm = 0x0005_0000 | 1;
        assert_eq!(call(seccomp, [1, 8, 0, 0, 0, 0]), eperm, "{arch}");
        assert_eq!(call(seccomp, [1, 8 | 32, 0, 0, 0, 0]), eperm, "{arch}");
        assert_eq!(
            call(seccomp, [1, 0, 0, 0, 0, 0]),
            layout::RET_ALLOW,
            "{arch}"
        );
        for (level, name) in [(1, 25), (1, 62), (0, 4)] {
            assert_eq!(call(setsockopt, [3, level, name, 0, 0, 0]), eperm, "{arch}");
        }
        assert_eq!(
            call(setsockopt, [3, 6, 1, 0, 0, 0]),
            layout::RET_ALLOW,
            "{arch}: TCP_NODELAY"
        );
        let tcp = program_with(arch, Sockets::Landlock { inet: Inet::Tcp }).unwrap();
        let d = Data {
            nr: setsockopt,
            arch: own,
            args: [3, 1, 25, 0, 0, 0],
        };
        assert_eq!(run(&tcp, &d).0, eperm, "{arch}: port-only TCP too");
    }
    // x32: setsockopt has its own number (541), seccomp shares 317, both with bit 30.
    let prog = program_with("x86_64", mediated).unwrap();
    let x32 = |nr: u32, args: [u64; 6]| {
        run(
            &prog,
            &Data {
                nr: nr | X32_BIT as u32,
                arch: AUDIT_ARCH_X86_64,
                args,
            },
        )
        .0
    };
    assert_eq!(x32(541, [3, 1, 25, 0, 0, 0]), 0x0005_0000 | 1);
    assert_eq!(x32(317, [1, 8, 0, 0, 0, 0]), 0x0005_0000 | 1);
    assert_eq!(x32(528, [0; 6]), 0x0005_0000 | 1, "x32 kexec_load");
    // x32's connect shares the number, with bit 30.
    let prog = program_with("x86_64", mediated).unwrap();
    let x32 = Data {
        nr: 42 | X32_BIT as u32,
        arch: AUDIT_ARCH_X86_64,
        args: [0; 6],
    };
    assert_eq!(run(&prog, &x32).0, RET_USER_NOTIF);
}

#[test]
fn bytes_are_eight_per_instruction() {
    let prog = program().unwrap();
    assert_eq!(to_bytes(&prog).len(), prog.len() * 8);
}
