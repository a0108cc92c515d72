//! The shape of the seccomp program: a binary search on the syscall number in front of the
//! per-syscall rule blocks, instead of seccompiler's chain that compares the number with
//! every listed syscall in turn.
//!
//! Why: the kernel pays for a filter at every launch in proportion to its shape. It checks,
//! converts and JIT-compiles each instruction, and it runs the filter once per syscall
//! number of the architecture (about 460 on x86_64) to cache which numbers are always
//! allowed. With the chain, an allowed number walked past all ~45 listed ones (about 90
//! instructions, some 40,000 emulated steps per launch); here it takes a handful of
//! comparisons. The same shape also makes the program shorter (identical rule blocks, such as
//! the native and x32 `ioctl`, are emitted once) and, at run time, decides x32 and
//! argument-checked calls in fewer steps (docs/benchmarks.md, issue 15, sixth round).
//!
//! The decisions are seccompiler's: each rule block is its compiled rule chain, unchanged,
//! entered as its syscall's comparison would enter it. A test runs this program and the
//! chain program on the same inputs and requires the same action for every one.
//!
//! Pure: builds instructions, never installs them. Never: return ALLOW for a number that has
//! rules, or build a program with a jump out of range (an error instead: the launch is then
//! refused).

use std::collections::BTreeMap;

use seccompiler::{sock_filter, BpfProgram, SeccompRule};

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JA: u16 = 0x05;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_JMP_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;

/// `offsetof(struct seccomp_data, nr)` and `arch`.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;

pub const RET_ALLOW: u32 = 0x7fff_0000;
pub const RET_KILL_PROCESS: u32 = 0x8000_0000;
pub const RET_ERRNO: u32 = 0x0005_0000;

/// At most this many numbers are compared one by one at the bottom of the search.
const LEAF: usize = 4;

/// Why the program cannot be laid out.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("seccomp program layout: a conditional jump of {0} instructions (at most 255)")]
    JumpTooFar(usize),
}

/// What the filter does with one syscall number.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// This action (an errno, a user notification), whatever the arguments.
    Fixed(u32),
    /// Decided by rule block `i`.
    Block(usize),
}

/// One instruction with jumps still symbolic.
#[derive(Debug, Clone)]
enum Ins {
    Plain(sock_filter),
    /// `if A <code> k goto jt else goto jf`.
    Cond {
        code: u16,
        k: u32,
        jt: Label,
        jf: Label,
    },
    Ja(Label),
    /// Marks a position; emits nothing.
    At(Label),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Label(usize);

struct Asm {
    ins: Vec<Ins>,
    labels: usize,
}

impl Asm {
    fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels - 1)
    }

    fn at(&mut self, l: Label) {
        self.ins.push(Ins::At(l));
    }

    fn ret(&mut self, k: u32) {
        self.ins.push(Ins::Plain(stmt(BPF_RET_K, k)));
    }
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

/// The program: the architecture check (any other than `audit_arch` is killed, as in
/// seccompiler's prelude), then the syscall number loaded and searched for among the keys
/// of `rules` (each refused with EPERM where its rules match, all of them when it has none)
/// and `fixed` (each answered with its action whatever the arguments, checked first); every
/// other number is allowed.
pub fn assemble(
    audit_arch: u32,
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    fixed: &[(i64, u32)],
) -> Result<BpfProgram, LayoutError> {
    let eperm = RET_ERRNO | libc::EPERM as u32;
    let mut blocks: Vec<Vec<sock_filter>> = Vec::new();
    let mut targets: BTreeMap<u32, Target> = BTreeMap::new();
    for (nr, chain) in rules {
        let target = if chain.is_empty() {
            Target::Fixed(eperm)
        } else {
            // seccompiler's chain for this syscall, without its number comparison: each
            // rule followed by the match action, then the mismatch action.
            let mut block = Vec::new();
            for rule in chain {
                block.extend(BpfProgram::from(rule));
                block.push(stmt(BPF_RET_K, eperm));
            }
            block.push(stmt(BPF_RET_K, RET_ALLOW));
            let i = match blocks.iter().position(|b| *b == block) {
                Some(i) => i,
                None => {
                    blocks.push(block);
                    blocks.len() - 1
                }
            };
            Target::Block(i)
        };
        targets.insert(number(nr), target);
    }
    for &(nr, action) in fixed {
        // Checked before the EPERM rules in the reference program too (see `reference.rs`).
        targets.insert(number(nr), Target::Fixed(action));
    }
    let mut asm = Asm {
        ins: vec![
            Ins::Plain(stmt(BPF_LD_W_ABS, ARCH_OFFSET)),
            Ins::Plain(sock_filter {
                code: BPF_JMP_JEQ_K,
                jt: 1,
                jf: 0,
                k: audit_arch,
            }),
            Ins::Plain(stmt(BPF_RET_K, RET_KILL_PROCESS)),
        ],
        labels: 0,
    };
    asm.ins.push(Ins::Plain(stmt(BPF_LD_W_ABS, NR_OFFSET)));
    let block_labels: Vec<Label> = blocks.iter().map(|_| asm.label()).collect();
    let keys: Vec<(u32, Target)> = targets.into_iter().collect();
    if keys.is_empty() {
        asm.ret(RET_ALLOW);
    } else {
        search(&mut asm, &keys, &block_labels);
    }
    for (block, label) in blocks.into_iter().zip(&block_labels) {
        asm.at(*label);
        asm.ins.extend(block.into_iter().map(Ins::Plain));
    }
    // The last rule's jump out of its block (never taken: blocks are entered only on their
    // number) must land inside the program, and a program ends with a return.
    asm.ret(RET_KILL_PROCESS);
    resolve(asm.ins)
}

/// A syscall number as the filter compares it (the 32-bit `seccomp_data.nr`).
fn number(nr: i64) -> u32 {
    nr as u32
}

/// The search over `keys` (sorted): halves split on `A >= key`, at most `LEAF` numbers
/// compared one by one at the bottom, each leaf ending in ALLOW.
fn search(asm: &mut Asm, keys: &[(u32, Target)], blocks: &[Label]) {
    if keys.len() <= LEAF {
        leaf(asm, keys, blocks);
        return;
    }
    let mid = keys.len() / 2;
    let (low, high) = (asm.label(), asm.label());
    asm.ins.push(Ins::Cond {
        code: BPF_JMP_JGE_K,
        k: keys[mid].0,
        jt: high,
        jf: low,
    });
    asm.at(low);
    search(asm, &keys[..mid], blocks);
    asm.at(high);
    search(asm, &keys[mid..], blocks);
}

/// Compares each number of `keys`; a match goes to its return or block, no match is
/// allowed. The targets sit right after the leaf, so every conditional jump is short.
fn leaf(asm: &mut Asm, keys: &[(u32, Target)], blocks: &[Label]) {
    let mut local: Vec<(Target, Label)> = Vec::new();
    for (nr, target) in keys {
        let to = match local.iter().find(|(t, _)| t == target) {
            Some((_, l)) => *l,
            None => {
                let l = asm.label();
                local.push((target.clone(), l));
                l
            }
        };
        let next = asm.label();
        asm.ins.push(Ins::Cond {
            code: BPF_JMP_JEQ_K,
            k: *nr,
            jt: to,
            jf: next,
        });
        asm.at(next);
    }
    asm.ret(RET_ALLOW);
    for (target, label) in local {
        asm.at(label);
        match target {
            Target::Fixed(k) => asm.ret(k),
            Target::Block(i) => asm.ins.push(Ins::Ja(blocks[i])),
        }
    }
}

/// Turns labels into forward jump offsets.
fn resolve(ins: Vec<Ins>) -> Result<BpfProgram, LayoutError> {
    let mut at: BTreeMap<Label, usize> = BTreeMap::new();
    let mut pos = 0;
    for i in &ins {
        match i {
            Ins::At(l) => {
                at.insert(*l, pos);
            }
            _ => pos += 1,
        }
    }
    let mut out = Vec::with_capacity(pos);
    // Every jump goes forward (labels are placed after the jumps to them): the distance
    // from the next instruction.
    let off = |from: usize, l: &Label| at.get(l).map_or(usize::MAX, |t| t.wrapping_sub(from + 1));
    let short = |d: usize| u8::try_from(d).map_err(|_| LayoutError::JumpTooFar(d));
    for i in ins {
        let here = out.len();
        match i {
            Ins::At(_) => {}
            Ins::Plain(f) => out.push(f),
            Ins::Cond { code, k, jt, jf } => out.push(sock_filter {
                code,
                jt: short(off(here, &jt))?,
                jf: short(off(here, &jf))?,
                k,
            }),
            Ins::Ja(l) => {
                let d = off(here, &l);
                out.push(stmt(
                    BPF_JMP_JA,
                    u32::try_from(d).map_err(|_| LayoutError::JumpTooFar(d))?,
                ));
            }
        }
    }
    Ok(out)
}
