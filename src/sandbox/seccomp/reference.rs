//! Test only: the program as seccompiler lays it out (one comparison per listed syscall, in
//! turn), with the clone3 check spliced in front, exactly as this module built it before
//! `layout`. The tests require `program_with` to decide every input as this one does.

use seccompiler::{sock_filter, BpfProgram, SeccompAction, SeccompFilter};

use super::{syscalls, SeccompError, Sockets};

/// Length of seccompiler 0.5's architecture validation prelude (checked by a test).
pub const ARCH_CHECK_LEN: usize = 3;

pub fn chain_program(arch: &str, sockets: Sockets) -> Result<BpfProgram, SeccompError> {
    let (rules, enosys, target) = syscalls(arch, sockets)?;
    let eperm = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        target,
    )?;
    let mut prog: BpfProgram = eperm.try_into()?;
    splice_enosys(&mut prog, &enosys);
    Ok(prog)
}

/// Inserts, right after seccompiler's architecture check, instructions that return ENOSYS
/// for each syscall number in `nrs`.
fn splice_enosys(prog: &mut BpfProgram, nrs: &[i64]) {
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JMP_JEQ_K: u16 = 0x15;
    const BPF_RET_K: u16 = 0x06;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    let mut ins = vec![sock_filter {
        code: BPF_LD_W_ABS,
        jt: 0,
        jf: 0,
        k: 0,
    }];
    for &n in nrs {
        ins.push(sock_filter {
            code: BPF_JMP_JEQ_K,
            jt: 0,
            jf: 1,
            k: n as u32,
        });
        ins.push(sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        });
    }
    let at = ARCH_CHECK_LEN.min(prog.len());
    prog.splice(at..at, ins);
}
