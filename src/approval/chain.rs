//! Asks approvers in order. The first `Approve` or `Deny` decides; `Pass` moves on; a
//! timeout or the end of the chain denies. Holds no lock across the wait: concurrent
//! escalations are independent (the tty approver serialises its own questions).

use std::sync::Arc;
use std::time::Duration;

use super::{Answer, Approver, ApproverKind, Decision, EscalationRequest};

pub struct ApprovalChain {
    approvers: Vec<Arc<dyn Approver>>,
    timeout: Duration,
}

impl ApprovalChain {
    pub fn new(approvers: Vec<Arc<dyn Approver>>, timeout: Duration) -> Self {
        ApprovalChain { approvers, timeout }
    }

    pub fn is_empty(&self) -> bool {
        self.approvers.is_empty()
    }

    pub async fn decide(&self, req: &EscalationRequest) -> Decision {
        let mut passes = Vec::new();
        for approver in &self.approvers {
            let kind = approver.kind();
            let answer = tokio::time::timeout(self.timeout, approver.ask(req, self.timeout))
                .await
                .unwrap_or_else(|_| {
                    Answer::Deny(format!(
                        "no answer from the {kind} approver within {} s",
                        self.timeout.as_secs()
                    ))
                });
            match answer {
                Answer::Approve | Answer::ApproveAndRemember => {
                    // Only a person widens a session: a program's approval covers one call,
                    // and nothing is remembered that the request did not offer.
                    let remember = answer == Answer::ApproveAndRemember
                        && kind != ApproverKind::Exec
                        && req.remember_scope.is_some();
                    return Decision {
                        approved: true,
                        decided_by: Some(kind),
                        detail: if remember {
                            format!("approved and remembered for this session by {kind}")
                        } else {
                            format!("approved by {kind}")
                        },
                        remember,
                    };
                }
                Answer::Deny(why) => {
                    return Decision {
                        approved: false,
                        decided_by: Some(kind),
                        detail: why,
                        remember: false,
                    }
                }
                Answer::Pass(why) => {
                    tracing::info!(approver = %kind, escalation = %req.escalation_id, "passed on: {why}");
                    passes.push(format!("{kind}: {why}"));
                }
            }
        }
        let detail = if self.approvers.is_empty() {
            "no approver is configured".to_string()
        } else {
            format!(
                "no approver decided ({}); configure a human approver (tty, dir:PATH or elicit)",
                passes.join("; ")
            )
        };
        Decision {
            approved: false,
            decided_by: None,
            detail,
            remember: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::BoxFuture;

    struct Fixed(ApproverKind, Answer);
    impl Approver for Fixed {
        fn kind(&self) -> ApproverKind {
            self.0
        }
        fn ask<'a>(&'a self, _: &'a EscalationRequest, _: Duration) -> BoxFuture<'a, Answer> {
            Box::pin(async move { self.1.clone() })
        }
    }
    struct Never;
    impl Approver for Never {
        fn kind(&self) -> ApproverKind {
            ApproverKind::Tty
        }
        fn ask<'a>(&'a self, _: &'a EscalationRequest, _: Duration) -> BoxFuture<'a, Answer> {
            Box::pin(futures::future::pending())
        }
    }

    fn req() -> EscalationRequest {
        EscalationRequest::new(
            "fs",
            "write",
            serde_json::json!({}),
            "r",
            serde_json::json!({}),
        )
    }

    #[tokio::test]
    async fn empty_chain_denies_with_the_standard_message() {
        let d = ApprovalChain::new(vec![], Duration::from_secs(5))
            .decide(&req())
            .await;
        assert!(!d.approved);
        assert_eq!(
            d.denial_message("writes need approval"),
            "ESCALATION REQUIRED: writes need approval. Denied: no approver is configured."
        );
    }

    #[tokio::test]
    async fn a_pass_moves_on_and_the_next_decides() {
        let chain = ApprovalChain::new(
            vec![
                Arc::new(Fixed(ApproverKind::Exec, Answer::Pass("escalate".into()))),
                Arc::new(Fixed(ApproverKind::Tty, Answer::Approve)),
            ],
            Duration::from_secs(5),
        );
        let d = chain.decide(&req()).await;
        assert!(d.approved);
        assert_eq!(d.decided_by, Some(ApproverKind::Tty));
    }

    #[tokio::test]
    async fn only_passes_is_a_denial() {
        let chain = ApprovalChain::new(
            vec![Arc::new(Fixed(
                ApproverKind::Exec,
                Answer::Pass("x".into()),
            ))],
            Duration::from_secs(5),
        );
        let d = chain.decide(&req()).await;
        assert!(!d.approved);
        assert_eq!(d.decided_by, None);
    }

    fn offered() -> EscalationRequest {
        req().with_remember_scope(Some(crate::approval::RememberScope {
            server: "fs".into(),
            tool: "write".into(),
            dirs: vec![crate::approval::RememberedDir {
                path: "/w/d".into(),
                access: crate::sandbox::Access::Rw,
            }],
            domains: vec![],
        }))
    }

    #[tokio::test]
    async fn a_human_may_remember_an_offered_scope() {
        let chain = ApprovalChain::new(
            vec![Arc::new(Fixed(
                ApproverKind::Dir,
                Answer::ApproveAndRemember,
            ))],
            Duration::from_secs(5),
        );
        let d = chain.decide(&offered()).await;
        assert!(d.approved && d.remember, "{d:?}");
        // Nothing offered, nothing remembered: the approval covers this one call.
        let d = chain.decide(&req()).await;
        assert!(d.approved && !d.remember, "{d:?}");
    }

    #[tokio::test]
    async fn a_program_never_remembers() {
        let chain = ApprovalChain::new(
            vec![Arc::new(Fixed(
                ApproverKind::Exec,
                Answer::ApproveAndRemember,
            ))],
            Duration::from_secs(5),
        );
        let d = chain.decide(&offered()).await;
        assert!(d.approved && !d.remember, "{d:?}");
        assert_eq!(d.decided_by, Some(ApproverKind::Exec));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_approver_times_out_into_a_denial() {
        let chain = ApprovalChain::new(vec![Arc::new(Never)], Duration::from_secs(5));
        let d = chain.decide(&req()).await;
        assert!(!d.approved);
        assert!(d.detail.contains("within 5 s"), "{}", d.detail);
    }
}
