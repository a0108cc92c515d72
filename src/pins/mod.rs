//! Tool pinning: what each server's tools said when a person trusted them, so that a change
//! made afterwards (a new description with instructions for the model, a widened schema, a
//! tool that was not there: a "rug pull") is held back until someone reviews it.
//!
//! `digest` fingerprints a definition (pure), `review` compares a server's listing with its
//! pins (pure), `diff` renders a change for a person and flags what looks like prompt
//! injection (pure), `file` loads and saves the pins file (the only I/O, atomic, locked,
//! permission-checked). The gateway applies the review at every catalog rebuild; `palisade
//! pins diff|approve` works on the file.

pub mod diff;
pub mod digest;
pub mod file;
pub mod review;

pub use file::{PinsError, PinsFile, ToolPin};
pub use review::{review, Change, ChangeKind, Mode, NewServers, Review};
