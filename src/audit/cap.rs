//! Bounds on what one audit record may add to the log. A call's arguments or its error text
//! can be as large as the transport allows (16 MiB); copied whole, each such call would grow
//! the log by as much. Every string longer than [`FIELD_CAP`] bytes keeps its first part and
//! is marked with its full length and the SHA-256 of the whole (so a copy kept elsewhere can
//! still be matched); if the record is still over [`RECORD_CAP`], its arguments are replaced
//! by their size and hash, then its error text likewise.
//!
//! Runs after redaction (hashes are of redacted text: a hash of a secret would let anyone
//! confirm a guess). Pure.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The longest string kept whole, in bytes.
pub const FIELD_CAP: usize = 16 * 1024;
/// The largest record body, in bytes of JSON, before whole fields are summarised.
pub const RECORD_CAP: usize = 256 * 1024;

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `s` cut to at most `FIELD_CAP` bytes (on a character boundary) with a marker, or `s`.
fn cap_str(s: &str) -> Option<String> {
    if s.len() <= FIELD_CAP {
        return None;
    }
    let mut end = FIELD_CAP;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Some(format!(
        "{}…[truncated: {} bytes in all, sha256 {}]",
        &s[..end],
        s.len(),
        sha256(s.as_bytes())
    ))
}

fn cap_strings(v: &mut Value) -> bool {
    match v {
        Value::String(s) => match cap_str(s) {
            Some(c) => {
                *s = c;
                true
            }
            None => false,
        },
        Value::Array(a) => a.iter_mut().fold(false, |cut, x| cap_strings(x) | cut),
        Value::Object(m) => m.values_mut().fold(false, |cut, x| cap_strings(x) | cut),
        _ => false,
    }
}

fn size(body: &Map<String, Value>) -> usize {
    serde_json::to_string(body).map_or(usize::MAX, |s| s.len())
}

/// An upper bound of the length of `v` as JSON text, found without writing it: each byte of
/// a string escapes to at most six (`\u001f`), a number takes at most 24 characters. Nearly
/// every record is far under `FIELD_CAP`, and this tells so without serialising it.
fn size_bound(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 24,
        Value::String(s) => s.len().saturating_mul(6).saturating_add(2),
        Value::Array(a) => a.iter().fold(2, |n: usize, x| {
            n.saturating_add(size_bound(x)).saturating_add(1)
        }),
        Value::Object(m) => object_bound(m),
    }
}

/// `size_bound` of an object: braces, and per member its key, value, colon and comma.
fn object_bound(m: &Map<String, Value>) -> usize {
    m.iter().fold(2, |n: usize, (k, x)| {
        n.saturating_add(k.len().saturating_mul(6))
            .saturating_add(size_bound(x))
            .saturating_add(4)
    })
}

/// What stands for a whole field: its size and hash, as JSON text.
fn summary(v: &Value) -> String {
    let text = v.to_string();
    format!(
        "[truncated: {} bytes in all, sha256 {}]",
        text.len(),
        sha256(text.as_bytes())
    )
}

/// Caps `body` in place; returns true when anything was cut.
pub fn cap_record(body: &mut Map<String, Value>) -> bool {
    if object_bound(body) <= FIELD_CAP {
        return false;
    }
    let before = size(body);
    if before <= FIELD_CAP {
        return false;
    }
    // Whole-field summaries are of the field as it came (redacted), before strings were cut.
    let over = before > RECORD_CAP;
    let args = body.get("arguments").filter(|_| over).map(summary);
    let error = body
        .get("result")
        .and_then(|r| r.get("error"))
        .filter(|_| over)
        .map(summary);
    let mut cut = body.values_mut().fold(false, |cut, v| cap_strings(v) | cut);
    if size(body) > RECORD_CAP {
        if let Some(s) = args {
            body.insert("arguments".into(), Value::String(s));
            cut = true;
        }
    }
    if size(body) > RECORD_CAP {
        if let (Some(s), Some(Value::Object(r))) = (error, body.get_mut("result")) {
            r.insert("error".into(), Value::String(s));
            cut = true;
        }
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_big_error_is_cut_with_its_length_and_hash() {
        let big = "é".repeat(6 * 1024 * 1024); // 12 MiB, two bytes per character
        let mut b = body(json!({"arguments": {"path": "/w"}, "result": {"error": big}}));
        assert!(cap_record(&mut b));
        let e = b["result"]["error"].as_str().unwrap();
        assert!(e.len() < FIELD_CAP + 200, "{}", e.len());
        assert!(
            e.contains(&format!(
                "[truncated: {} bytes in all, sha256 {}]",
                big.len(),
                sha256(big.as_bytes())
            )),
            "{}",
            &e[e.len() - 120..]
        );
        assert_eq!(b["arguments"]["path"], "/w");
    }

    #[test]
    fn many_fields_over_the_record_cap_summarise_the_arguments() {
        let args: Map<String, Value> = (0..100)
            .map(|i| (format!("k{i}"), Value::String("x".repeat(10_000))))
            .collect();
        let whole = Value::Object(args.clone()).to_string();
        let mut b = body(json!({"arguments": args, "result": {"status": "success"}}));
        assert!(cap_record(&mut b));
        assert_eq!(
            b["arguments"],
            format!(
                "[truncated: {} bytes in all, sha256 {}]",
                whole.len(),
                sha256(whole.as_bytes())
            )
        );
        assert!(size(&b) <= RECORD_CAP);
    }

    proptest::proptest! {
        // The shortcut in `cap_record` is sound only if the bound is never below the text.
        #[test]
        fn the_size_bound_is_never_below_the_json_text(v in json_value()) {
            let text = v.to_string();
            proptest::prop_assert!(size_bound(&v) >= text.len(), "{} < {}", size_bound(&v), text.len());
            if let Value::Object(m) = &v {
                proptest::prop_assert!(object_bound(m) >= size(m));
            }
        }
    }

    /// Any JSON value: control characters, quotes and non-ASCII in keys and strings, extreme
    /// numbers, nesting.
    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "[\\x00-\\x1f\"\\\\a-zé\\u{2028}\\u{10348}]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec(("[\\x00-\\x1f\"a-z]{0,6}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn small_records_are_untouched() {
        let v = json!({"arguments": {"a": "x".repeat(FIELD_CAP)}, "result": {"error": "e"}});
        let mut b = body(v.clone());
        assert!(!cap_record(&mut b));
        assert_eq!(Value::Object(b), v);
    }
}
