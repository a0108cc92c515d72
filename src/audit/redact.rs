//! Redaction of argument values before they reach the audit log: payment card numbers
//! (Luhn-checked, so order numbers and timestamps survive), US social security numbers,
//! well-known API key formats, and values of arguments whose name says they are secrets.
//! Or, in `Shapes` mode, no values at all: only the structure and each value's type.
//!
//! Pure. Must never log more than it was given; when in doubt, redact.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

/// How much of the arguments the log keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Redaction {
    /// Values kept, sensitive patterns replaced (the default).
    #[default]
    Sensitive,
    /// Structure kept, every value replaced by its type (strings with their length).
    Shapes,
}

// Immutable, compiled once; the patterns are literals, so compilation cannot fail.
#[allow(clippy::expect_used)]
static CARD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b\d(?:[ -]?\d){12,18}\b").expect("literal regex"));
#[allow(clippy::expect_used)]
static SSN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(\d{3})-(\d{2})-(\d{4})\b|\b(\d{3}) (\d{2}) (\d{4})\b").expect("literal regex")
});
#[allow(clippy::expect_used)]
static API_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"\b(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}",
        r"|gh[pousr]_[A-Za-z0-9]{36,}",
        r"|github_pat_[A-Za-z0-9_]{22,}",
        r"|xox[abprs]-[A-Za-z0-9-]{10,}",
        r"|AKIA[0-9A-Z]{16}",
        r"|AIza[0-9A-Za-z_-]{35}",
        r"|glpat-[A-Za-z0-9_-]{20,})"
    ))
    .expect("literal regex")
});
#[allow(clippy::expect_used)]
static SECRET_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(password|passwd|passphrase|secret|token|api[_-]?key|authorization|credential|private[_-]?key)")
        .expect("literal regex")
});

/// Luhn checksum over the digits of `s` (other characters ignored).
pub fn luhn_valid(s: &str) -> bool {
    let digits: Vec<u32> = s.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(13..=19).contains(&digits.len()) {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 {
                    x - 9
                } else {
                    x
                }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

fn ssn_plausible(area: &str, group: &str, serial: &str) -> bool {
    area != "000" && area != "666" && !area.starts_with('9') && group != "00" && serial != "0000"
}

/// Replaces sensitive substrings of one string.
pub fn redact_str(s: &str) -> String {
    let s = API_KEY.replace_all(s, "[REDACTED:api-key]");
    let s = CARD.replace_all(&s, |c: &regex::Captures<'_>| {
        if luhn_valid(&c[0]) {
            "[REDACTED:card]".to_string()
        } else {
            c[0].to_string()
        }
    });
    let s = SSN.replace_all(&s, |c: &regex::Captures<'_>| {
        let g = |a: usize, b: usize| c.get(a).or_else(|| c.get(b)).map_or("", |m| m.as_str());
        if ssn_plausible(g(1, 4), g(2, 5), g(3, 6)) {
            "[REDACTED:ssn]".to_string()
        } else {
            c[0].to_string()
        }
    });
    s.into_owned()
}

/// The arguments as they may be logged.
pub fn redact_arguments(args: &Value, mode: Redaction) -> Value {
    match mode {
        Redaction::Sensitive => sensitive(args),
        Redaction::Shapes => shape(args),
    }
}

fn sensitive(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(redact_str(s)),
        Value::Array(a) => Value::Array(a.iter().map(sensitive).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let v = if SECRET_NAME.is_match(k) && !v.is_null() {
                        Value::String("[REDACTED:secret]".into())
                    } else {
                        sensitive(v)
                    };
                    (k.clone(), v)
                })
                .collect::<Map<_, _>>(),
        ),
        other => other.clone(),
    }
}

fn shape(v: &Value) -> Value {
    match v {
        Value::Null => Value::String("null".into()),
        Value::Bool(_) => Value::String("boolean".into()),
        Value::Number(_) => Value::String("number".into()),
        Value::String(s) => Value::String(format!("string({})", s.chars().count())),
        Value::Array(a) => Value::Array(a.iter().map(shape).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cards_are_redacted_only_when_luhn_valid() {
        // 4111 1111 1111 1111 is the classic Visa test number (Luhn-valid).
        assert_eq!(
            redact_str("pay 4111 1111 1111 1111 now"),
            "pay [REDACTED:card] now"
        );
        assert_eq!(
            redact_str("card 4111-1111-1111-1111"),
            "card [REDACTED:card]"
        );
        // Same length, checksum off by one: an order number, kept.
        assert_eq!(
            redact_str("order 4111111111111112"),
            "order 4111111111111112"
        );
    }

    #[test]
    fn ssns_and_api_keys_are_redacted() {
        assert_eq!(redact_str("ssn 123-45-6789."), "ssn [REDACTED:ssn].");
        assert_eq!(redact_str("not 000-12-3456"), "not 000-12-3456");
        let k = format!("key=sk-{}", "a".repeat(24));
        assert_eq!(redact_str(&k), "key=[REDACTED:api-key]");
        assert_eq!(redact_str("AKIAIOSFODNN7EXAMPLE"), "[REDACTED:api-key]");
        let gh = format!("ghp_{}", "b".repeat(36));
        assert_eq!(redact_str(&gh), "[REDACTED:api-key]");
    }

    #[test]
    fn secret_named_arguments_and_nesting() {
        let a =
            json!({"path":"/tmp/x","password":"hunter2","nested":[{"note":"4111111111111111"}]});
        let r = redact_arguments(&a, Redaction::Sensitive);
        assert_eq!(
            r,
            json!({"path":"/tmp/x","password":"[REDACTED:secret]","nested":[{"note":"[REDACTED:card]"}]})
        );
    }

    #[test]
    fn shapes_keep_structure_only() {
        let a = json!({"path":"/secret/file","n":3,"flags":[true,null]});
        assert_eq!(
            redact_arguments(&a, Redaction::Shapes),
            json!({"path":"string(12)","n":"number","flags":["boolean","null"]})
        );
    }
}
