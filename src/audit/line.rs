//! One audit record as one line of JSON text, redacted (`redact`) and bounded (`cap`), for
//! the log when no audit file is configured; and that redacted, bounded object
//! (`bounded_body`), which the audit file seals into its chain. Pure.
//!
//! The general way builds the record as a `serde_json::Value`, redacts every string of it,
//! caps it and writes it out. Nearly every record has nothing to redact or cap, and for those
//! that way returns exactly the text `serde_json` writes from the record directly; so that
//! text is written first, and kept when it shows that nothing would change (`untouched`).

use serde_json::{Map, Value};

use super::cap::{cap_record, FIELD_CAP};
use super::record::AuditRecord;
use super::redact::{self, Redaction};

/// The record as the log writes it.
pub fn to_line(record: &AuditRecord, mode: Redaction) -> Result<String, serde_json::Error> {
    if mode == Redaction::Sensitive {
        if let Some(text) = untouched(record)? {
            return Ok(text);
        }
    }
    general(record, mode)
}

/// The record through `Value`: redacted, capped, written.
fn general(record: &AuditRecord, mode: Redaction) -> Result<String, serde_json::Error> {
    serde_json::to_string(&bounded_body(record, mode)?)
}

/// The record as the JSON object both the log line and the audit file write: every string
/// redacted (an error text echoes the arguments, so not only they), then bounded, so that one
/// call cannot add megabytes.
pub fn bounded_body(
    record: &AuditRecord,
    mode: Redaction,
) -> Result<Map<String, Value>, serde_json::Error> {
    let Value::Object(mut body) = serde_json::to_value(record)? else {
        return Err(serde::ser::Error::custom("record is not an object"));
    };
    redact::redact_record(&mut body, mode);
    cap_record(&mut body);
    Ok(body)
}

/// The record's text, when sensitive redaction and the caps leave every string of it as it
/// is; `None` when they might not. Sound because each test is wider than what it stands for:
/// - No secret-named key anywhere in the arguments: then no value is replaced for its key,
///   and there are no known secret values to search the other strings for.
/// - No backslash in the text: no string needed escaping, so each string stands in the text
///   exactly as it is. Then no redaction pattern matching the whole text means none matches
///   any one string: the patterns have no `^`/`$` anchors, only `\b`, and a string's quotes
///   are non-word characters as its ends would be. (The text holds more than the strings:
///   keys, punctuation. That can only add matches, and a match sends the record the general
///   way.)
/// - At most `FIELD_CAP` bytes: `cap_record` leaves such a record alone.
fn untouched(record: &AuditRecord) -> Result<Option<String>, serde_json::Error> {
    let text = serde_json::to_string(record)?;
    let clean = text.len() <= FIELD_CAP
        && !text.contains('\\')
        && !redact::has_secret_named_key(&record.arguments)
        && !redact::any_pattern_in(&text);
    Ok(clean.then_some(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// A sandboxed call's record with these arguments, failed with `error` if given.
    fn record(arguments: Value, error: Option<String>) -> AuditRecord {
        let status = if error.is_some() { "error" } else { "success" };
        serde_json::from_value(json!({
            "timestamp": "2026-11-27T01:48:28.123Z", "requestId": "17",
            "serverName": "fs", "toolName": "read_file", "arguments": arguments,
            "policyDecision": {"status": "allow", "rule": "allow-reads",
                               "reason": "reads in the workspace"},
            "result": {"status": status, "error": error},
            "durationMs": 3, "sandboxed": true, "sandboxBackend": "bwrap"
        }))
        .unwrap()
    }

    #[test]
    fn a_plain_record_is_its_own_text_and_the_others_go_the_general_way() {
        let plain = record(json!({"path": "/w/report.pdf", "n": 1.5}), None);
        assert!(untouched(&plain).unwrap().is_some());
        for (args, error) in [
            (json!({"api_key": "abcdefgh"}), None),
            (json!({"nested": [{"Password": null}]}), None),
            (
                json!({"path": "/w/a"}),
                Some("token sk-abcdefghijklmnopqrstuvwx".into()),
            ),
            (json!({"url": "https://u:p@example.com/"}), None),
            (json!({"text": "a \"quoted\" word"}), None),
            // Escaped in the text, the tab no longer separates `Bearer` from its token.
            (json!({"header": "Bearer\tabcdefgh12345678"}), None),
            (json!({"text": "x".repeat(FIELD_CAP)}), None),
        ] {
            let r = record(args.clone(), error);
            assert!(untouched(&r).unwrap().is_none(), "{args}");
            assert_eq!(
                to_line(&r, Redaction::Sensitive).unwrap(),
                general(&r, Redaction::Sensitive).unwrap()
            );
        }
    }

    proptest! {
        // Whichever way a record takes, its line is the general way's.
        #[test]
        fn the_shortcut_writes_what_the_general_way_writes(
            key in "[a-zA-Z_]{1,10}",
            value in r#"[ -~]{0,40}|(https?://[a-z:@/]{0,20}|Bearer [A-Za-z0-9]{0,12}|[0-9 -]{0,24}|[?&](token|key|pw)=[a-z]{0,6}|(sk|rk)_(live|test)_[A-Za-z0-9]{0,12}|eyJ[A-Za-z0-9._-]{0,30}|[A-Za-z0-9/+]{38,42}|\u{9b}|é){1,3}"#,
            error in proptest::option::of(r"[ -~]{0,40}"),
            number in any::<f64>(),
        ) {
            let mut args = serde_json::Map::new();
            args.insert("n".into(), json!(number));
            args.insert("list".into(), json!([key.clone()]));
            args.insert(key, Value::String(value));
            let r = record(Value::Object(args), error);
            prop_assert_eq!(
                to_line(&r, Redaction::Sensitive).unwrap(),
                general(&r, Redaction::Sensitive).unwrap()
            );
        }
    }
}
