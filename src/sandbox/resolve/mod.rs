//! Enforce or warn, decided per server: (machine capabilities, what the server needs, the
//! sandbox policy) -> sandboxed, degraded with reasons, or refused with reasons. Pure: the
//! same inputs always give the same answer, and every reason names its fix (a package, a
//! sysctl, an AppArmor profile, a configuration change).
//!
//! Gaps come in two kinds. A *hard* gap means bubblewrap cannot run at all (missing, too old,
//! no user namespaces): warn mode then runs the command directly. A *soft* gap means the
//! sandbox runs with less than was asked (no seccomp, network wider than configured, a
//! backend not available): warn mode runs it in the weaker sandbox. Enforce refuses both.
//!
//! Network: a server with a domain allowlist needs socat (inside its sandbox) and a running
//! egress proxy; without either, warn mode shares the host network (the allowlist is then
//! NOT enforced, and every audit record says so). `backend: srt` needs srt, runnable, and
//! the tools srt needs on Linux (bwrap, socat, rg); without them warn mode falls back to
//! palisade's own bubblewrap sandbox.
//!
//! The decision is split by job: `bwrap_gaps` (what bubblewrap and srt lack here),
//! `landlock_gaps` (what the Landlock tier lacks here, and its decision), and this module
//! (the types, the tier choice and the final enforce/warn verdict).

mod bwrap_gaps;
mod landlock_gaps;

use std::fmt;

use serde::Serialize;

use super::capabilities::Capabilities;
use crate::config::{Backend, SandboxPolicy};
use bwrap_gaps::{hard_gaps, soft_gaps};
use landlock_gaps::{landlock_hard_gaps, resolve_landlock};

/// What a server asks of its sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needs {
    /// `false` when the user opted the server out (`"sandbox": false`).
    pub sandboxed: bool,
    pub backend: Backend,
    /// It needs outbound HTTP(S) to an allowlist (the egress proxy).
    pub egress: bool,
    /// Why the egress proxy cannot serve this server (it failed to start), if it cannot.
    pub egress_problem: Option<String>,
    /// An allowlist held by port only (the Landlock tier's) is accepted: Palisade's package
    /// fetch sandbox only (`LaunchRequest::allowlist_by_port`).
    pub allowlist_by_port: bool,
}

/// One gap: what is missing and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reason {
    pub problem: String,
    pub fix: String,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (fix: {})", self.problem, self.fix)
    }
}

fn reason(problem: impl Into<String>, fix: impl Into<String>) -> Reason {
    Reason {
        problem: problem.into(),
        fix: fix.into(),
    }
}

/// How the command will actually be run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Under bubblewrap (`false`: directly, warn mode only).
    pub bwrap: bool,
    pub seccomp: bool,
    /// Share the host network (only ever a warn-mode degradation).
    pub host_network: bool,
    /// Run under srt instead of palisade's own bubblewrap sandbox (`backend: srt`).
    pub srt: bool,
    /// Run under the Landlock tier instead of bubblewrap (`bwrap` is then false).
    pub landlock: bool,
}

impl Plan {
    /// In some sandbox at all (`false`: run directly, warn mode only).
    pub fn contained(&self) -> bool {
        self.bwrap || self.landlock
    }
}

/// The decision for one server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "status")]
pub enum Resolution {
    Sandboxed { plan: Plan },
    Degraded { plan: Plan, reasons: Vec<Reason> },
    Refused { reasons: Vec<Reason> },
    OptedOut,
}

/// Which tier `backend` gets on this machine, and why (for `check` and the launch log).
pub fn tier(caps: &Capabilities, backend: Backend) -> (Backend, String) {
    match backend {
        Backend::Auto => {
            let bwrap = hard_gaps(caps);
            if bwrap.is_empty() {
                return (
                    Backend::Bwrap,
                    "auto: bubblewrap can create its namespaces".into(),
                );
            }
            let why = bwrap
                .iter()
                .map(|r| r.problem.clone())
                .collect::<Vec<_>>()
                .join("; ");
            match caps.landlock.abi() {
                Some(abi) => (
                    Backend::Landlock,
                    format!("auto: bubblewrap cannot run here ({why}); Landlock ABI {abi} can"),
                ),
                None => (
                    Backend::Auto,
                    format!("auto: neither bubblewrap ({why}) nor Landlock is usable here"),
                ),
            }
        }
        other => (other, format!("backend {} (configured)", other.name())),
    }
}

/// Decides how to run a server.
pub fn resolve(caps: &Capabilities, needs: &Needs, policy: SandboxPolicy) -> Resolution {
    if !needs.sandboxed {
        return Resolution::OptedOut;
    }
    match tier(caps, needs.backend).0 {
        Backend::Landlock => return resolve_landlock(caps, needs, policy),
        Backend::Auto => {
            // Neither works: report both, bubblewrap's gaps first.
            let mut hard = hard_gaps(caps);
            hard.extend(landlock_hard_gaps(caps));
            let plan = Plan {
                bwrap: true,
                seccomp: true,
                host_network: false,
                srt: false,
                landlock: false,
            };
            return finish(plan, hard, Vec::new(), policy);
        }
        Backend::Bwrap | Backend::Srt => {}
    }
    let mut plan = Plan {
        bwrap: true,
        seccomp: true,
        host_network: false,
        srt: false,
        landlock: false,
    };
    let hard = hard_gaps(caps);
    let soft = soft_gaps(caps, needs, &mut plan);
    finish(plan, hard, soft, policy)
}

/// Hard gaps (the tier cannot run) and soft ones (it runs weaker) under `policy`.
fn finish(plan: Plan, hard: Vec<Reason>, soft: Vec<Reason>, policy: SandboxPolicy) -> Resolution {
    if hard.is_empty() && soft.is_empty() {
        return Resolution::Sandboxed { plan };
    }
    let broken = !hard.is_empty();
    let reasons: Vec<Reason> = hard.into_iter().chain(soft).collect();
    match policy {
        SandboxPolicy::Enforce => Resolution::Refused { reasons },
        SandboxPolicy::Warn if broken => Resolution::Degraded {
            plan: Plan {
                bwrap: false,
                seccomp: false,
                host_network: true,
                srt: false,
                landlock: false,
            },
            reasons,
        },
        SandboxPolicy::Warn => Resolution::Degraded { plan, reasons },
    }
}

#[cfg(test)]
mod tests;
