//! How an escalation reaches a human. The gateway's approval stage hands an
//! `EscalationRequest` to an `ApprovalChain`; the chain asks its approvers in order until one
//! decides. Every failure mode (timeout, malformed answer, unreachable approver) is a denial.
//!
//! Approvers: `deny` (unattended), `dir:PATH` (IronCurtain-compatible file IPC), `tty` (the
//! controlling terminal, never the MCP stdio), `elicit` (MCP elicitation to the upstream
//! client, through the `Elicitor` the gateway provides), `exec:CMD` (a program that may
//! approve or pass the question on, never deny on a human's behalf), and `auto`.
//! `remember` defines the "approve and remember" scope a human approver may accept with an
//! approval (`Answer::ApproveAndRemember`); the gateway keeps accepted scopes per session.

mod chain;
pub(crate) mod dir;
mod display;
mod elicit;
mod exec;
mod remember;
mod request;
mod spec;
mod tty;

pub use chain::ApprovalChain;
pub use dir::{
    write_response, write_response_remembering, DirApprover, PendingRequest, UnreadableRequest,
};
pub use display::{describe_request, terminal_safe};
pub use elicit::{ElicitApprover, ElicitError, ElicitOutcome, Elicitor};
pub use exec::{ExecApprover, ExecCommandError};
pub use remember::{CallSubject, RememberScope, RememberedDir, SubjectPath};
pub use request::{Answer, ApproverKind, Decision, EscalationRequest};
pub use spec::{
    build as build_chain, parse_escalation, ApproverSpec, BuildError, SpecError, TIMEOUT_RANGE,
};
pub use tty::TtyApprover;

use futures::future::BoxFuture;
use std::time::Duration;

/// One way of asking for a decision.
pub trait Approver: Send + Sync {
    fn kind(&self) -> ApproverKind;
    /// Asks about `req`; must answer within `timeout` (the chain also enforces it).
    fn ask<'a>(&'a self, req: &'a EscalationRequest, timeout: Duration) -> BoxFuture<'a, Answer>;
}
