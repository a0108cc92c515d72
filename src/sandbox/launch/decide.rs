//! The pure plan of a launch: what the request needs of the machine, the enforce/warn
//! resolution against the probed capabilities, and the decision that follows from it
//! (refuse, run directly, or contain under a named tier with its enforcement record).
//!
//! Pure: no filesystem, no environment, no processes; every input is a value (the request,
//! the `Capabilities` already probed), so each rule is unit-tested here. Never: contain a
//! command without saying which tier does it, or degrade without the reasons.

use std::borrow::Cow;

use super::prepared::{Enforcement, LaunchError};
use super::request::{EgressSocket, LaunchRequest};
use crate::config::{Backend, NetworkConfig, SandboxPolicy};
use crate::sandbox::capabilities::Capabilities;
use crate::sandbox::resolve::{self, Needs, Plan, Resolution};

/// What `req` asks of the machine.
pub fn needs(req: &LaunchRequest) -> Needs {
    let egress = matches!(req.network, NetworkConfig::Allowlist(_));
    Needs {
        sandboxed: req.sandboxed,
        backend: req.backend,
        egress,
        egress_problem: match &req.egress {
            EgressSocket::Failed(why) if egress => Some(why.clone()),
            _ => None,
        },
        allowlist_by_port: req.allowlist_by_port,
    }
}

/// Whether `req` runs under the Landlock tier with a domain allowlist, so that the egress
/// proxy must open its loopback endpoint for it (there is no namespace to bridge the socket
/// into).
pub fn needs_loopback_endpoint(req: &LaunchRequest, caps: &Capabilities) -> bool {
    req.sandboxed
        && matches!(req.network, NetworkConfig::Allowlist(_))
        && resolve::tier(caps, req.backend).0 == Backend::Landlock
}

/// The enforce/warn decision for `req` on a machine with `caps`, without building anything.
pub fn resolution(req: &LaunchRequest, caps: &Capabilities) -> Resolution {
    resolve::resolve(caps, &needs(req), req.policy)
}

/// `req` as launching sees it: a proxy nobody started is a proxy that is not running (fail
/// closed, and say so).
pub(super) fn with_egress_fallback(req: &LaunchRequest) -> Cow<'_, LaunchRequest> {
    if req.egress == EgressSocket::NotStarted && matches!(req.network, NetworkConfig::Allowlist(_))
    {
        let mut resolved = req.clone();
        resolved.egress =
            EgressSocket::Failed("no egress proxy was started for this server".into());
        Cow::Owned(resolved)
    } else {
        Cow::Borrowed(req)
    }
}

/// What launching does with one request.
#[derive(Debug)]
pub(super) enum Decision {
    /// Nothing starts; the error says why.
    Refuse(LaunchError),
    /// The command runs without a sandbox (opted out, or warn with no tier that works).
    Direct(Enforcement),
    /// The command runs contained as `plan` says.
    Contain {
        plan: Plan,
        enforcement: Enforcement,
    },
}

/// The decision for server `name` once resolved.
pub(super) fn decide(name: &str, resolution: Resolution) -> Decision {
    let texts = |reasons: Vec<resolve::Reason>| -> Vec<String> {
        reasons.iter().map(ToString::to_string).collect()
    };
    match resolution {
        Resolution::Refused { reasons } => Decision::Refuse(LaunchError::Refused {
            name: name.to_string(),
            reasons: texts(reasons),
        }),
        Resolution::OptedOut => Decision::Direct(Enforcement::OptedOut),
        Resolution::Degraded { plan, reasons } if !plan.contained() => {
            Decision::Direct(Enforcement::Degraded {
                backend: None,
                reasons: texts(reasons),
            })
        }
        Resolution::Degraded { plan, reasons } => Decision::Contain {
            plan,
            enforcement: Enforcement::Degraded {
                backend: Some(tier_of(&plan)),
                reasons: texts(reasons),
            },
        },
        Resolution::Sandboxed { plan } => Decision::Contain {
            plan,
            enforcement: Enforcement::Sandboxed {
                backend: tier_of(&plan),
            },
        },
    }
}

/// The backend a plan runs under.
pub(super) fn tier_of(plan: &Plan) -> Backend {
    if plan.srt {
        Backend::Srt
    } else if plan.landlock {
        Backend::Landlock
    } else {
        Backend::Bwrap
    }
}

/// The enforcement once a tier found `gaps` it cannot enforce: refused under enforce; under
/// warn the record turns (or stays) degraded with the gaps added to its reasons.
pub(super) fn with_gaps(
    name: &str,
    policy: SandboxPolicy,
    tier: Backend,
    enforcement: Enforcement,
    gaps: Vec<String>,
) -> Result<Enforcement, LaunchError> {
    if gaps.is_empty() {
        return Ok(enforcement);
    }
    match policy {
        SandboxPolicy::Enforce => Err(LaunchError::Refused {
            name: name.to_string(),
            reasons: gaps,
        }),
        SandboxPolicy::Warn => Ok(match enforcement {
            Enforcement::Degraded {
                backend,
                mut reasons,
            } => {
                reasons.extend(gaps);
                Enforcement::Degraded { backend, reasons }
            }
            _ => Enforcement::Degraded {
                backend: Some(tier),
                reasons: gaps,
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DomainLists;

    fn plan(bwrap: bool, landlock: bool, srt: bool) -> Plan {
        Plan {
            bwrap,
            seccomp: true,
            host_network: false,
            srt,
            landlock,
        }
    }

    fn reason(problem: &str) -> resolve::Reason {
        resolve::Reason {
            problem: problem.into(),
            fix: "fix it".into(),
        }
    }

    #[test]
    fn each_plan_names_its_tier() {
        assert_eq!(tier_of(&plan(true, false, false)), Backend::Bwrap);
        assert_eq!(tier_of(&plan(false, true, false)), Backend::Landlock);
        assert_eq!(tier_of(&plan(true, false, true)), Backend::Srt);
    }

    #[test]
    fn a_refusal_names_the_server_and_every_reason() {
        let d = decide(
            "fs",
            Resolution::Refused {
                reasons: vec![reason("no bwrap"), reason("no landlock")],
            },
        );
        let Decision::Refuse(LaunchError::Refused { name, reasons }) = d else {
            panic!("expected a refusal, got {d:?}");
        };
        assert_eq!(name, "fs");
        assert_eq!(
            reasons,
            ["no bwrap (fix: fix it)", "no landlock (fix: fix it)"]
        );
    }

    #[test]
    fn opted_out_and_uncontained_warn_run_directly_and_say_so() {
        assert!(matches!(
            decide("fs", Resolution::OptedOut),
            Decision::Direct(Enforcement::OptedOut)
        ));
        let d = decide(
            "fs",
            Resolution::Degraded {
                plan: plan(false, false, false),
                reasons: vec![reason("no sandbox works here")],
            },
        );
        let Decision::Direct(Enforcement::Degraded { backend, reasons }) = d else {
            panic!("expected a direct degraded run, got {d:?}");
        };
        assert_eq!(backend, None, "no tier contains it: none is named");
        assert_eq!(reasons.len(), 1);
    }

    #[test]
    fn a_contained_plan_keeps_its_tier_in_the_record() {
        let d = decide(
            "fs",
            Resolution::Sandboxed {
                plan: plan(false, true, false),
            },
        );
        assert!(matches!(
            d,
            Decision::Contain {
                enforcement: Enforcement::Sandboxed {
                    backend: Backend::Landlock
                },
                ..
            }
        ));
        let d = decide(
            "fs",
            Resolution::Degraded {
                plan: plan(true, false, false),
                reasons: vec![reason("host network")],
            },
        );
        assert!(matches!(
            d,
            Decision::Contain {
                enforcement: Enforcement::Degraded {
                    backend: Some(Backend::Bwrap),
                    ..
                },
                ..
            }
        ));
    }

    #[test]
    fn gaps_refuse_under_enforce_and_degrade_under_warn() {
        let sandboxed = Enforcement::Sandboxed {
            backend: Backend::Landlock,
        };
        let gaps = vec!["denyRead /a cannot be carved".to_string()];
        assert!(matches!(
            with_gaps(
                "fs",
                SandboxPolicy::Enforce,
                Backend::Landlock,
                sandboxed.clone(),
                gaps.clone()
            ),
            Err(LaunchError::Refused { .. })
        ));
        assert_eq!(
            with_gaps(
                "fs",
                SandboxPolicy::Warn,
                Backend::Landlock,
                sandboxed.clone(),
                gaps.clone()
            )
            .unwrap(),
            Enforcement::Degraded {
                backend: Some(Backend::Landlock),
                reasons: gaps.clone()
            }
        );
        let degraded = Enforcement::Degraded {
            backend: Some(Backend::Landlock),
            reasons: vec!["host network".into()],
        };
        assert_eq!(
            with_gaps(
                "fs",
                SandboxPolicy::Warn,
                Backend::Landlock,
                degraded,
                gaps.clone()
            )
            .unwrap(),
            Enforcement::Degraded {
                backend: Some(Backend::Landlock),
                reasons: vec!["host network".into(), gaps[0].clone()]
            },
            "earlier reasons stay, the gaps follow"
        );
        assert_eq!(
            with_gaps(
                "fs",
                SandboxPolicy::Enforce,
                Backend::Landlock,
                sandboxed.clone(),
                Vec::new()
            )
            .unwrap(),
            sandboxed,
            "no gap, no change"
        );
    }

    #[test]
    fn an_allowlist_without_a_started_proxy_is_a_failed_proxy() {
        let mut req = LaunchRequest {
            network: NetworkConfig::Allowlist(DomainLists::default()),
            ..LaunchRequest::default()
        };
        assert!(matches!(
            with_egress_fallback(&req).egress,
            EgressSocket::Failed(_)
        ));
        assert!(needs(&with_egress_fallback(&req)).egress_problem.is_some());
        req.network = NetworkConfig::None;
        assert!(matches!(with_egress_fallback(&req), Cow::Borrowed(_)));
    }
}
