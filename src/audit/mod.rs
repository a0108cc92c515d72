//! The audit log: one hash-chained JSONL record per call that reached the gateway's
//! pipeline (denied calls too), written and flushed before the response goes upstream.
//!
//! Where it sits: the gateway builds an [`AuditRecord`] after the call completes (or is
//! denied) and calls [`AuditLog::append`]; on `Err` the call fails closed.
//! `palisade audit verify` uses [`verify::verify`] and checks the chain's anchor (the head
//! file next to the log, see [`anchor`]).
//!
//! Must never: write an unredacted argument (redaction is on unless shapes-only is chosen),
//! drop a record silently, or keep writing after a failed write.

pub mod anchor;
pub mod cap;
pub mod chain;
pub mod line;
pub mod log;
pub mod record;
pub mod redact;
pub mod verify;

pub use log::{AuditError, AuditLog, AuditOptions};
pub use record::{
    now_rfc3339, ApprovedRoot, AuditRecord, CallResult, EscalationResult, NetworkRefusal,
    PolicyDecisionRecord, ProtocolVersions, RecordKind, ResultStatus,
};
pub use redact::Redaction;
