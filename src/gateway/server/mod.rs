//! One downstream server: `supervisor` starts, watches, restarts and stops it through a
//! `launcher` (production: `spawn` makes its launch request and sandboxed process; the
//! pipeline's unit tests: an in-process task over `tokio::io::duplex` pipes); `peer` is its
//! JSON-RPC wire (lines read by `tap`, writes watched by `stdin_watch`, faults and its end in
//! `fault`); `handler` answers what it sends us (roots from `roots`, progress through `progress`,
//! sampling and elicitation through `relay/`); `era` decides whether it is spoken to in 2026-07-28
//! (and answers that era's input requests' rounds), and `listen` hears such a server's list
//! changes.

/// The limit of one JSON-RPC line (rmcp's, kept so both directions agree): what the tap
/// reads, what a server's output budget must hold at least once, and the agent's line cap.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

pub mod envelope;
pub mod era;
pub mod fault;
pub mod handler;
pub mod launcher;
pub mod listen;
pub mod listing;
pub mod note_line;
pub mod peer;
pub mod progress;
pub mod relay;
pub mod request;
pub mod roots;
pub mod spawn;
pub mod stdin_watch;
pub mod supervisor;
pub mod tap;
