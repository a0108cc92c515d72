//! Redaction of argument values before they reach the audit log: payment card numbers
//! (Luhn-checked, so order numbers and timestamps survive; spaces, dashes or dots between
//! digits), US social security numbers, well-known API key formats (Stripe's `sk_live_…`
//! too), bearer tokens and JWTs, user:password in URLs, secret-looking query parameters
//! (`?access_token=`), AWS secret access keys, and values of arguments whose name says they
//! are secrets (`password`, `db_pass`, `pw`, `Cookie`, …). Or, in `Shapes` mode, no values at
//! all: only the structure and each value's type.
//!
//! [`redact_record`] applies this to a whole record: the arguments by the chosen mode, and
//! every other string of the record (the error text above all, which often echoes an
//! argument) by the patterns and by the values the arguments' secret-named keys held.
//!
//! Pure. Must never log more than it was given; when in doubt, redact.

use std::sync::LazyLock;

use regex::{Regex, RegexSet};
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
const CARD_PATTERN: &str = r"\b\d(?:[ .-]?\d){12,18}\b";
#[allow(clippy::expect_used)]
static CARD: LazyLock<Regex> = LazyLock::new(|| Regex::new(CARD_PATTERN).expect("literal regex"));
const SSN_PATTERN: &str = r"\b(\d{3})-(\d{2})-(\d{4})\b|\b(\d{3}) (\d{2}) (\d{4})\b";
#[allow(clippy::expect_used)]
static SSN: LazyLock<Regex> = LazyLock::new(|| Regex::new(SSN_PATTERN).expect("literal regex"));
const API_KEY_PATTERN: &str = concat!(
    r"\b(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}",
    r"|gh[pousr]_[A-Za-z0-9]{36,}",
    r"|github_pat_[A-Za-z0-9_]{22,}",
    r"|xox[abprs]-[A-Za-z0-9-]{10,}",
    r"|AKIA[0-9A-Z]{16}",
    r"|AIza[0-9A-Za-z_-]{35}",
    r"|glpat-[A-Za-z0-9_-]{20,}",
    r"|[rsp]k_(?:live|test)_[A-Za-z0-9]{10,})"
);
#[allow(clippy::expect_used)]
static API_KEY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(API_KEY_PATTERN).expect("literal regex"));
#[allow(clippy::expect_used)]
static SECRET_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?i)(pass|pwd|secret|token|api[_-]?key|auth(?:$|[_-]|oriz|entic)|credential",
        r"|private[_-]?key|access[_-]?key|cookie|session|bearer|signature",
        // `pw` as a word of the name: `pw`, `db_pw`, `pw-hash`, `userPw`, not `pwm`.
        r"|(?:^|[_.-])pw(?:$|[_.-])|[a-z]Pw(?:$|[A-Z_.-]))"
    ))
    .expect("literal regex")
});
/// `Bearer <token>` (an `Authorization` header value written into any text).
const BEARER_PATTERN: &str = r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}";
#[allow(clippy::expect_used)]
static BEARER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(BEARER_PATTERN).expect("literal regex"));
/// A JSON Web Token: three base64url parts, the first a JSON object (`eyJ`).
const JWT_PATTERN: &str = r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*";
#[allow(clippy::expect_used)]
static JWT: LazyLock<Regex> = LazyLock::new(|| Regex::new(JWT_PATTERN).expect("literal regex"));
/// `scheme://user:password@host`: the user information of a URL.
const URL_USERINFO_PATTERN: &str = r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s@]*:[^/?#\s@]*@";
#[allow(clippy::expect_used)]
static URL_USERINFO: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(URL_USERINFO_PATTERN).expect("literal regex"));
/// A query or fragment parameter whose name says it carries a secret.
const SECRET_PARAM_PATTERN: &str = concat!(
    r"(?i)([?&#;](?:access_token|refresh_token|id_token|token|api_key|apikey|key|secret",
    r"|client_secret|password|passwd|pwd|pw|pass|auth|sig|signature|session|sessionid",
    r"|x-amz-signature|x-amz-credential|x-amz-security-token)=)[^&#\s]+"
);
#[allow(clippy::expect_used)]
static SECRET_PARAM: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(SECRET_PARAM_PATTERN).expect("literal regex"));
/// `aws_secret_access_key = …` and its spellings, with the 40-character key after it.
const AWS_SECRET_ASSIGNED_PATTERN: &str =
    r#"(?i)(secret_?access_?key|aws_?secret(?:_?key)?)(["']?\s*[=:]\s*["']?)[A-Za-z0-9/+]{40}\b"#;
#[allow(clippy::expect_used)]
static AWS_SECRET_ASSIGNED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(AWS_SECRET_ASSIGNED_PATTERN).expect("literal regex"));
/// A candidate AWS secret access key on its own: a run of exactly 40 base64 characters
/// (checked further in `looks_like_aws_secret`).
const BASE64_40_PATTERN: &str = r"[A-Za-z0-9/+]{40,}";
#[allow(clippy::expect_used)]
static BASE64_40: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(BASE64_40_PATTERN).expect("literal regex"));

/// Values shorter than this under a secret-named key are not searched for elsewhere (a
/// one-character "secret" would blank every occurrence of that character).
const MIN_KNOWN_SECRET: usize = 4;

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

/// A 40-character run that mixes upper case, lower case and digits, as an AWS secret key
/// does, and is not a path (no leading or trailing `/`, at most two `/`). Hex digests (git
/// object names, SHA-1) have no upper case and are kept.
fn looks_like_aws_secret(run: &str) -> bool {
    run.len() == 40
        && run.bytes().any(|b| b.is_ascii_uppercase())
        && run.bytes().any(|b| b.is_ascii_lowercase())
        && run.bytes().any(|b| b.is_ascii_digit())
        && !run.starts_with('/')
        && !run.ends_with('/')
        && run.bytes().filter(|&b| b == b'/').count() <= 2
}

/// Every pattern `redact_str` replaces, matched in one pass: a string none of them matches
/// (nearly every string of a record) is returned as it is, without nine scans.
#[allow(clippy::expect_used)]
static ANY_PATTERN: LazyLock<RegexSet> = LazyLock::new(|| {
    RegexSet::new([
        URL_USERINFO_PATTERN,
        SECRET_PARAM_PATTERN,
        JWT_PATTERN,
        BEARER_PATTERN,
        AWS_SECRET_ASSIGNED_PATTERN,
        BASE64_40_PATTERN,
        API_KEY_PATTERN,
        CARD_PATTERN,
        SSN_PATTERN,
    ])
    .expect("literal regexes")
});

/// Replaces sensitive substrings of one string.
pub fn redact_str(s: &str) -> String {
    // Each replacement below only ever acts where its pattern matches; when none matches the
    // original, none matches any intermediate string either (each is the original).
    if !ANY_PATTERN.is_match(s) {
        return s.to_string();
    }
    let s = URL_USERINFO.replace_all(s, "$1[REDACTED:userinfo]@");
    let s = SECRET_PARAM.replace_all(&s, "$1[REDACTED:secret]");
    let s = JWT.replace_all(&s, "[REDACTED:jwt]");
    let s = BEARER.replace_all(&s, "$1 [REDACTED:token]");
    let s = AWS_SECRET_ASSIGNED.replace_all(&s, "$1$2[REDACTED:aws-secret]");
    let s = BASE64_40.replace_all(&s, |c: &regex::Captures<'_>| {
        if looks_like_aws_secret(&c[0]) {
            "[REDACTED:aws-secret]".to_string()
        } else {
            c[0].to_string()
        }
    });
    let s = API_KEY.replace_all(&s, "[REDACTED:api-key]");
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

/// The string values held under secret-named keys anywhere in `args` (long enough to search
/// for): a server's error text that echoes one is redacted too.
pub fn secret_values(args: &Value) -> Vec<String> {
    fn walk(v: &Value, under_secret: bool, out: &mut Vec<String>) {
        match v {
            Value::String(s)
                if under_secret && s.chars().count() >= MIN_KNOWN_SECRET && !out.contains(s) =>
            {
                out.push(s.clone());
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, under_secret, out)),
            Value::Object(m) => m
                .iter()
                .for_each(|(k, x)| walk(x, under_secret || SECRET_NAME.is_match(k), out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(args, false, &mut out);
    // Longest first, so a secret containing another is replaced whole.
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out
}

/// True when some key anywhere in `args` names a secret: sensitive redaction then replaces
/// its value, and searches the record's other strings for it.
pub fn has_secret_named_key(args: &Value) -> bool {
    match args {
        Value::Array(a) => a.iter().any(has_secret_named_key),
        Value::Object(m) => m
            .iter()
            .any(|(k, v)| SECRET_NAME.is_match(k) || has_secret_named_key(v)),
        _ => false,
    }
}

/// True when any of the patterns `redact_str` replaces occurs in `s`.
pub fn any_pattern_in(s: &str) -> bool {
    ANY_PATTERN.is_match(s)
}

/// `s` with the patterns and every known secret value redacted.
pub fn redact_text(s: &str, known: &[String]) -> String {
    let mut out = redact_str(s);
    for k in known {
        if out.contains(k.as_str()) {
            out = out.replace(k.as_str(), "[REDACTED:secret]");
        }
    }
    out
}

/// `s` redacted as `redact_text` does, or `None` when nothing in it is to be redacted:
/// nearly every string of a record, which is then left where it is instead of copied.
fn redacted_if_needed(s: &str, known: &[String]) -> Option<String> {
    let known_here = known.iter().any(|k| s.contains(k.as_str()));
    (known_here || ANY_PATTERN.is_match(s)).then(|| redact_text(s, known))
}

/// Replaces each string of `v` for which `f` returns a new one.
fn map_strings(v: &mut Value, f: &dyn Fn(&str) -> Option<String>) {
    match v {
        Value::String(s) => {
            if let Some(new) = f(s) {
                *s = new;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| map_strings(x, f)),
        Value::Object(m) => m.values_mut().for_each(|x| map_strings(x, f)),
        _ => {}
    }
}

/// Redacts a whole record body (an audit record serialised to a JSON object): `arguments`
/// by `mode`, every other string by the patterns and by the values the arguments held under
/// secret-named keys. Keys other than the arguments' are the record's own and are kept.
pub fn redact_record(body: &mut Map<String, Value>, mode: Redaction) {
    let known = body.get("arguments").map(secret_values).unwrap_or_default();
    let text = |s: &str| redacted_if_needed(s, &known);
    for (k, v) in body.iter_mut() {
        if k == "arguments" {
            *v = redact_arguments(v, mode);
            if mode == Redaction::Sensitive {
                map_strings(v, &text);
            }
        } else {
            map_strings(v, &text);
        }
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

    /// Issue 23, finding 10: each of these reached the log in clear.
    #[test]
    fn the_review_s_gaps_are_redacted() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        let aws = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
        let a = json!({
            "db_pass": "hunter22", "pw": "hunter23", "userPw": "hunter24",
            "headers": {"Cookie": "sid=abc123def", "X-Note": format!("Bearer {jwt}")},
            "auth": format!("bearer {jwt}"),
            "url": "https://alice:s3cr3t@example.com/x?access_token=tok123456&page=2",
            "note": format!("sk_live_{} and 4111.1111.1111.1111 and {jwt}", "a1B2c3D4e5F6g7H8"),
            "env": format!("AWS_SECRET_ACCESS_KEY={aws}"),
            "raw": aws,
        });
        let r = redact_arguments(&a, Redaction::Sensitive).to_string();
        for leak in [
            "hunter22",
            "hunter23",
            "hunter24",
            "abc123def",
            jwt,
            "s3cr3t",
            "tok123456",
            "a1B2c3D4e5F6g7H8",
            "4111",
            aws,
        ] {
            assert!(!r.contains(leak), "{leak} in {r}");
        }
        for kept in ["example.com/x", "page=2", "AWS_SECRET_ACCESS_KEY="] {
            assert!(r.contains(kept), "{kept} lost in {r}");
        }
    }

    #[test]
    fn ordinary_values_survive() {
        for s in [
            "/home/u/Projects/notes/today.md",
            "commit 3f786850e387550fdab836ed7e6dc881de23001b",
            "https://example.com/search?q=passport&page=2",
            "version 1.2.3, port 8080, 2026-11-25T20:13:33.123Z",
            "the author wrote a passage",
            "a progress token required; basic functionality",
        ] {
            assert_eq!(redact_str(s), s);
        }
        // Names that merely contain letters of a secret name are kept.
        let a = json!({"author": "ann", "pwm_channel": 3, "compass": "n"});
        assert_eq!(redact_arguments(&a, Redaction::Sensitive)["author"], "ann");
    }

    #[test]
    fn the_error_and_every_other_field_are_redacted_with_the_arguments_secrets() {
        let mut body = json!({
            "arguments": {"password": "correct horse battery", "path": "/w/f"},
            "result": {"status": "error",
                       "error": "login failed for password 'correct horse battery' with sk_live_a1B2c3D4e5F6g7H8"},
            "policyDecision": {"reason": "token=abcd1234 https://u:p@h/"},
        })
        .as_object()
        .unwrap()
        .clone();
        redact_record(&mut body, Redaction::Sensitive);
        let t = Value::Object(body).to_string();
        for leak in ["correct horse battery", "a1B2c3D4e5F6g7H8", "u:p@"] {
            assert!(!t.contains(leak), "{leak} in {t}");
        }
        assert!(t.contains("/w/f") && t.contains("login failed"), "{t}");
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

#[cfg(test)]
mod one_pass {
    use super::*;
    use proptest::prelude::*;

    /// The patterns, one by one, as `redact_str` applies them.
    fn each() -> [&'static LazyLock<Regex>; 9] {
        [
            &URL_USERINFO,
            &SECRET_PARAM,
            &JWT,
            &BEARER,
            &AWS_SECRET_ASSIGNED,
            &BASE64_40,
            &API_KEY,
            &CARD,
            &SSN,
        ]
    }

    #[test]
    fn the_one_pass_check_sees_every_pattern_class() {
        for s in [
            "https://u:p@example.com/x",
            "/a?token=abc",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
            "Authorization: Bearer abcdefgh12345",
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "sk_live_abcdefghijkl",
            "4111 1111 1111 1111",
            "123-45-6789",
        ] {
            assert!(ANY_PATTERN.is_match(s), "{s}");
            assert_ne!(redact_str(s), s, "{s}");
        }
    }

    proptest! {
        // The shortcut is sound only if the set matches whenever one of the patterns does.
        #[test]
        fn the_set_matches_exactly_when_a_pattern_does(
            s in r"[ -~]{0,60}|(https?://[a-z:@/]{0,20}|Bearer [A-Za-z0-9]{0,12}|[0-9 -]{0,24}|[?&](token|key|pw)=[a-z]{0,6}|(sk|rk)_(live|test)_[A-Za-z0-9]{0,12}|eyJ[A-Za-z0-9._-]{0,30}){1,3}"
        ) {
            let any = each().iter().any(|r| r.is_match(&s));
            prop_assert_eq!(ANY_PATTERN.is_match(&s), any);
        }

        // A record's string left in place is one `redact_text` would have returned as it was.
        #[test]
        fn a_string_left_in_place_is_one_with_nothing_to_redact(
            s in r"[ -~]{0,60}|(https?://[a-z:@/]{0,20}|Bearer [A-Za-z0-9]{0,12}|[?&](token|key|pw)=[a-z]{0,6}|hunter2[a-z]{0,4}){1,3}",
            known in proptest::collection::vec("hunter2[a-z]{0,2}|[a-z]{8}", 0..3),
        ) {
            let full = redact_text(&s, &known);
            match redacted_if_needed(&s, &known) {
                Some(new) => prop_assert_eq!(new, full),
                None => prop_assert_eq!(s, full),
            }
        }
    }
}
