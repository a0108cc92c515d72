//! Test only: the program as seccompiler lays it out (one comparison per listed syscall, in
//! turn), with the fixed actions (clone3's ENOSYS, a mediated connect's notification) spliced
//! in front, exactly as this module built it before
//! `layout`. The tests require `program_with` to decide every input as this one does.

use seccompiler::{sock_filter, BpfProgram, SeccompAction, SeccompFilter};

use super::{syscalls, SeccompError, Sockets, Syscalls};

/// Length of seccompiler 0.5's architecture validation prelude (checked by a test).
pub const ARCH_CHECK_LEN: usize = 3;

pub fn chain_program(arch: &str, sockets: Sockets) -> Result<BpfProgram, SeccompError> {
    let Syscalls {
        rules,
        fixed,
        target,
    } = syscalls(arch, sockets)?;
    let eperm = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        target,
    )?;
    let mut prog: BpfProgram = eperm.try_into()?;
    splice_fixed(&mut prog, &fixed);
    Ok(prog)
}

/// Inserts, right after seccompiler's architecture check, instructions that return each
/// syscall number's fixed action in `fixed`.
fn splice_fixed(prog: &mut BpfProgram, fixed: &[(i64, u32)]) {
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JMP_JEQ_K: u16 = 0x15;
    const BPF_RET_K: u16 = 0x06;
    let mut ins = vec![sock_filter {
        code: BPF_LD_W_ABS,
        jt: 0,
        jf: 0,
        k: 0,
    }];
    for &(n, action) in fixed {
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
            k: action,
        });
    }
    let at = ARCH_CHECK_LEN.min(prog.len());
    prog.splice(at..at, ins);
}
