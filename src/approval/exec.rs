//! `exec:CMD`: an external program (an LLM intent matcher, a team's own rules) gets the
//! request as JSON on stdin and answers `approve` or `escalate` on stdout. Only `approve`
//! decides; anything else, including a crash or a timeout, passes the question on, so a
//! program can approve but never silence a human.

use std::process::Stdio;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Answer, Approver, ApproverKind, EscalationRequest};

const MAX_ANSWER_BYTES: u64 = 4096;

/// Why an `exec:` command cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ExecCommandError {
    #[error("exec:{command}: {cause}")]
    Quoting {
        command: String,
        cause: shell_words::ParseError,
    },
    #[error("exec: needs a command, e.g. exec:/usr/local/bin/approver")]
    Empty,
}

pub struct ExecApprover {
    argv: Vec<String>,
}

impl ExecApprover {
    /// `command` is split with shell quoting rules (no shell is run).
    pub fn new(command: &str) -> Result<Self, ExecCommandError> {
        let argv = shell_words::split(command).map_err(|source| ExecCommandError::Quoting {
            command: command.to_string(),
            cause: source,
        })?;
        if argv.is_empty() {
            return Err(ExecCommandError::Empty);
        }
        Ok(ExecApprover { argv })
    }
}

impl Approver for ExecApprover {
    fn kind(&self) -> ApproverKind {
        ApproverKind::Exec
    }

    fn ask<'a>(&'a self, req: &'a EscalationRequest, timeout: Duration) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            match tokio::time::timeout(timeout, self.run(req)).await {
                Ok(Ok(out)) if out == "approve" => Answer::Approve,
                Ok(Ok(out)) => Answer::Pass(format!("program answered `{out}`")),
                Ok(Err(e)) => Answer::Pass(format!("program failed: {e}")),
                Err(_) => Answer::Pass("program did not answer in time".into()),
            }
        })
    }
}

impl ExecApprover {
    async fn run(&self, req: &EscalationRequest) -> std::io::Result<String> {
        let mut child = tokio::process::Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let body = serde_json::to_vec(req)?;
        if let Some(mut stdin) = child.stdin.take() {
            // A program that does not read its input is allowed; ignore EPIPE.
            let _ = stdin.write_all(&body).await;
        }
        let mut out = String::new();
        if let Some(stdout) = child.stdout.take() {
            stdout
                .take(MAX_ANSWER_BYTES)
                .read_to_string(&mut out)
                .await?;
        }
        let status = child.wait().await?;
        if !status.success() {
            return Err(std::io::Error::other(format!("exited with {status}")));
        }
        Ok(out.trim().to_ascii_lowercase())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    async fn approve_decides_everything_else_passes() {
        let t = Duration::from_secs(10);
        let a = ExecApprover::new("sh -c 'cat >/dev/null; echo approve'").unwrap();
        assert_eq!(a.ask(&req(), t).await, Answer::Approve);
        let a = ExecApprover::new("sh -c 'echo escalate'").unwrap();
        assert!(matches!(a.ask(&req(), t).await, Answer::Pass(_)));
        let a = ExecApprover::new("sh -c 'echo deny'").unwrap();
        assert!(
            matches!(a.ask(&req(), t).await, Answer::Pass(_)),
            "cannot silence a human"
        );
        let a = ExecApprover::new("sh -c 'echo approve; exit 3'").unwrap();
        assert!(matches!(a.ask(&req(), t).await, Answer::Pass(_)));
        let a = ExecApprover::new("/nonexistent/approver").unwrap();
        assert!(matches!(a.ask(&req(), t).await, Answer::Pass(_)));
    }

    #[tokio::test]
    async fn the_program_sees_the_request_as_json() {
        let a =
            ExecApprover::new("sh -c 'grep -q \"\\\"serverName\\\":\\\"fs\\\"\" && echo approve'")
                .unwrap();
        assert_eq!(
            a.ask(&req(), Duration::from_secs(10)).await,
            Answer::Approve
        );
    }

    #[tokio::test]
    async fn a_slow_program_passes_on_timeout() {
        let a = ExecApprover::new("sleep 30").unwrap();
        assert!(matches!(
            a.ask(&req(), Duration::from_millis(200)).await,
            Answer::Pass(_)
        ));
    }
}
