//! Where a server may operate, made real: `spec` (what the sandbox contains; plain data),
//! `base` (the curated system base; reads the host root), `closure` (what a command needs to
//! start; reads the filesystem), `bwrap` (a spec rendered as a bubblewrap argv; pure),
//! `seccomp` (the syscall filter; pure), `capabilities` (what this machine can enforce;
//! probes), `trial_record` (a passed trial sandbox, remembered for minutes in one context),
//! `cgroup` (per-server memory and task limits), `resolve` (enforce/warn decision per server;
//! pure), `deny_write` (denyWrite paths and their placeholders), `launch` (the only part that
//! builds processes), `sys` (its raw system calls) and `trace` (reads an strace log of a run
//! for `--trace-denials`; pure).

pub mod base;
pub mod bwrap;
pub mod capabilities;
pub mod cgroup;
pub mod closure;
pub mod connect_gate;
pub mod deny_write;
pub mod landlock;
pub mod launch;
pub mod resolve;
pub mod seccomp;
pub mod spec;
pub mod srt;
mod sys;
pub mod task_count;
pub mod trace;
pub mod trial_record;
pub mod write_protect;

pub use spec::*;
