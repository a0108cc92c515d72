//! The `--escalation` value: `deny | dir:PATH | tty | elicit | exec:CMD | auto`, chained with
//! commas (`exec:CMD,tty`). Parsing is pure; `build` turns specs into approvers.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::exec::ExecCommandError;
use super::{
    ApprovalChain, Approver, DirApprover, ElicitApprover, Elicitor, ExecApprover, TtyApprover,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApproverSpec {
    Deny,
    Dir(PathBuf),
    Tty,
    Elicit,
    Exec(String),
    /// elicit when the client declared it, else the terminal when there is one, else deny.
    Auto,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--escalation `{value}`: {message} (expected deny, dir:PATH, tty, elicit, exec:CMD or auto, comma-chained)")]
pub struct SpecError {
    pub value: String,
    pub message: String,
}

const KINDS: [&str; 6] = ["deny", "dir:", "tty", "elicit", "exec:", "auto"];

/// Parses a chain. A comma starts a new approver only when a known kind follows it, so a
/// command after `exec:` may itself contain commas.
pub fn parse_escalation(value: &str) -> Result<Vec<ApproverSpec>, SpecError> {
    let err = |message: String| SpecError {
        value: value.to_string(),
        message,
    };
    let mut items: Vec<String> = Vec::new();
    for part in value.split(',') {
        let starts_kind = KINDS.iter().any(|k| {
            let t = part.trim_start();
            if k.ends_with(':') {
                t.starts_with(k)
            } else {
                t == *k
            }
        });
        match items.last_mut() {
            Some(last) if !starts_kind && last.trim_start().starts_with("exec:") => {
                last.push(',');
                last.push_str(part);
            }
            _ => items.push(part.to_string()),
        }
    }
    let mut specs = Vec::new();
    for item in items {
        let t = item.trim();
        let spec = if t == "deny" {
            ApproverSpec::Deny
        } else if t == "tty" {
            ApproverSpec::Tty
        } else if t == "elicit" {
            ApproverSpec::Elicit
        } else if t == "auto" {
            ApproverSpec::Auto
        } else if let Some(p) = t.strip_prefix("dir:") {
            if p.is_empty() {
                return Err(err(
                    "dir: needs a directory, e.g. dir:/run/palisade/approvals".into(),
                ));
            }
            ApproverSpec::Dir(PathBuf::from(p))
        } else if let Some(c) = item.trim_start().strip_prefix("exec:") {
            if c.trim().is_empty() {
                return Err(err("exec: needs a command".into()));
            }
            ApproverSpec::Exec(c.to_string())
        } else {
            return Err(err(format!("unknown approver `{t}`")));
        };
        specs.push(spec);
    }
    if specs.is_empty() {
        return Err(err("empty".into()));
    }
    if specs.len() > 1 && specs.contains(&ApproverSpec::Deny) {
        return Err(err("`deny` cannot be chained with approvers".into()));
    }
    Ok(specs)
}

/// Why a parsed chain cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Exec(#[from] ExecCommandError),
    #[error("elicit needs an upstream MCP client (palisade serve)")]
    NoUpstream,
}

/// Builds the chain. `elicitor` is the gateway's upstream side (absent outside `serve`).
pub fn build(
    specs: &[ApproverSpec],
    elicitor: Option<Arc<dyn Elicitor>>,
    timeout: Duration,
) -> Result<ApprovalChain, BuildError> {
    let mut approvers: Vec<Arc<dyn Approver>> = Vec::new();
    for spec in specs {
        match spec {
            ApproverSpec::Deny => {}
            ApproverSpec::Dir(p) => approvers.push(Arc::new(DirApprover::new(p.clone()))),
            ApproverSpec::Tty => approvers.push(Arc::new(TtyApprover::controlling())),
            ApproverSpec::Exec(c) => approvers.push(Arc::new(ExecApprover::new(c)?)),
            ApproverSpec::Elicit => match &elicitor {
                Some(e) => approvers.push(Arc::new(ElicitApprover::new(e.clone()))),
                None => return Err(BuildError::NoUpstream),
            },
            ApproverSpec::Auto => {
                if let Some(e) = &elicitor {
                    approvers.push(Arc::new(ElicitApprover::new(e.clone())));
                }
                approvers.push(Arc::new(TtyApprover::controlling()));
            }
        }
    }
    Ok(ApprovalChain::new(approvers, timeout))
}

/// The allowed range of `--escalation-timeout`, in seconds.
pub const TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 5..=3600;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_and_chains() {
        assert_eq!(parse_escalation("deny").unwrap(), vec![ApproverSpec::Deny]);
        assert_eq!(
            parse_escalation("exec:my-approver --x a,b,tty").unwrap(),
            vec![
                ApproverSpec::Exec("my-approver --x a,b".into()),
                ApproverSpec::Tty
            ]
        );
        assert_eq!(
            parse_escalation("dir:/run/a,elicit,auto").unwrap(),
            vec![
                ApproverSpec::Dir("/run/a".into()),
                ApproverSpec::Elicit,
                ApproverSpec::Auto
            ]
        );
    }

    #[test]
    fn rejects_nonsense_with_the_choices() {
        let e = parse_escalation("yolo").unwrap_err().to_string();
        assert!(
            e.contains("unknown approver `yolo`") && e.contains("dir:PATH"),
            "{e}"
        );
        assert!(parse_escalation("dir:").is_err());
        assert!(parse_escalation("deny,tty").is_err());
    }
}
