//! What the demo concludes from what it saw: which layer stopped a call, and which audit
//! records belong to which call.
//!
//! Pure: text and JSON in, verdicts out. Tolerant of wording (the gateway, the policy engine
//! and the fs-server word their refusals differently) but never of substance: a refusal that
//! still carries the protected content, or a "blocked" write whose file exists, is a failure
//! decided by the caller from facts, not from these labels.

use serde_json::Value;

/// Who stopped a call, judged from the text the agent received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// The gateway marked it `[SANDBOX BLOCKED]`, or the kernel's refusal shows through.
    Sandbox,
    /// The policy denied it, or an escalation was refused.
    Policy,
    /// The fs-server's own RootGuard (FORBIDDEN).
    ServerRoots,
    /// Refused or failed, no recognisable layer.
    Unknown,
}

impl Layer {
    pub fn describe(self) -> &'static str {
        match self {
            Layer::Sandbox => "the sandbox",
            Layer::Policy => "the policy",
            Layer::ServerRoots => "the server's roots guard",
            Layer::Unknown => "an unidentified layer",
        }
    }
}

/// Classifies the text of a refused call.
pub fn refusal_layer(text: &str) -> Layer {
    let lower = text.to_ascii_lowercase();
    if text.contains("[SANDBOX BLOCKED]")
        || lower.contains("read-only file system")
        || lower.contains("erofs")
        || lower.contains("permission denied")
        || lower.contains("operation not permitted")
    {
        Layer::Sandbox
    } else if lower.contains("policy")
        || lower.contains("escalation")
        || lower.contains("denied")
        || lower.contains("deny")
    {
        Layer::Policy
    } else if text.contains("FORBIDDEN") {
        Layer::ServerRoots
    } else {
        Layer::Unknown
    }
}

/// Parses a JSONL audit log, skipping blank lines; a malformed line is an error (the log
/// must be machine-readable).
pub fn parse_audit(text: &str) -> Result<Vec<Value>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

/// The record of the call to `tool` (bare or `server__tool`) with argument `path`.
pub fn find_record<'a>(records: &'a [Value], tool: &str, path: &str) -> Option<&'a Value> {
    records.iter().find(|r| {
        let name = r["toolName"].as_str().unwrap_or_default();
        let tool_matches = name == tool || name.ends_with(&format!("__{tool}"));
        tool_matches && r["arguments"]["path"].as_str() == Some(path)
    })
}

/// One line for a person: `fs/read  policy=allow (rule)  result=success  sandboxed=true`.
pub fn summarize_record(r: &Value) -> String {
    let s = |v: &Value| {
        v.as_str()
            .map(str::to_string)
            .unwrap_or_else(|| v.to_string())
    };
    // `status` is the contract's name; `decision` is accepted as a synonym.
    let pd = &r["policyDecision"];
    let decision = if pd["status"].is_null() {
        &pd["decision"]
    } else {
        &pd["status"]
    };
    let mut line = format!(
        "{}/{}  policy={}",
        s(&r["serverName"]),
        s(&r["toolName"]),
        s(decision)
    );
    if let Some(rule) = r["policyDecision"]["rule"].as_str() {
        line.push_str(&format!(" ({rule})"));
    }
    line.push_str(&format!("  result={}", s(&r["result"]["status"])));
    if let Some(sb) = r.get("sandboxed") {
        line.push_str(&format!("  sandboxed={sb}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn layers_from_real_wordings() {
        assert_eq!(
            refusal_layer("[SANDBOX BLOCKED] the sandbox of server `fs` refused a write"),
            Layer::Sandbox
        );
        assert_eq!(
            refusal_layer(
                r#"{"error":"IO_ERROR","message":"cannot write /w/x: Read-only file system (os error 30)"}"#
            ),
            Layer::Sandbox
        );
        assert_eq!(
            refusal_layer("DENIED by policy rule default-outside-roots: /x is outside"),
            Layer::Policy
        );
        assert_eq!(
            refusal_layer("ESCALATION REQUIRED: needs approval. Denied: no approver"),
            Layer::Policy
        );
        assert_eq!(
            refusal_layer(r#"{"error":"FORBIDDEN","message":"/x is outside the allowed roots"}"#),
            Layer::ServerRoots
        );
        assert_eq!(refusal_layer("something broke"), Layer::Unknown);
    }

    #[test]
    fn audit_records_are_matched_by_tool_and_path() {
        let log = r#"
{"toolName":"read","serverName":"fs","arguments":{"path":"/a"},"policyDecision":{"status":"allow","rule":"r1"},"result":{"status":"success"},"sandboxed":true}
{"toolName":"fs__write","serverName":"fs","arguments":{"path":"/b"},"policyDecision":{"status":"allow"},"result":{"status":"error"}}
"#;
        let recs = parse_audit(log).unwrap();
        assert_eq!(recs.len(), 2);
        assert!(find_record(&recs, "read", "/a").is_some());
        assert!(find_record(&recs, "write", "/b").is_some());
        assert!(find_record(&recs, "read", "/b").is_none());
        assert_eq!(
            summarize_record(&recs[0]),
            "fs/read  policy=allow (r1)  result=success  sandboxed=true"
        );
        assert!(parse_audit("{not json").is_err());
        let _ = json!({});
    }
}
