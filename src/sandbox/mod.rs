//! Where a server may operate, made real: `spec` (what the sandbox contains; plain data),
//! `bwrap` (a spec rendered as a bubblewrap argv; pure), `capabilities` (what this machine
//! can enforce; probes), `resolve` (enforce/warn decision per server; pure), `launch` (the
//! only part that starts processes).

pub mod launch;
pub mod spec;

pub use spec::*;
