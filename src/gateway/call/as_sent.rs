//! A `tools/call`'s params as the agent wrote them, for the server: the same text with the
//! tool's name set to the server's own and `_meta.progressToken` replaced by Palisade's; every
//! other byte (number spellings, key order, fields no typed model knows) goes on as sent.
//!
//! Why: the params used to be decoded into `serde_json::Value`s and encoded again. That
//! re-spelled numbers (`1e3` as `1000.0`; an integer past 2^64 became the nearest float, so
//! the server read a different number than the agent sent), re-ordered keys, and cost three
//! passes over the arguments on every call.
//!
//! Never: forward text whose meaning the policy may not have seen. The text is used only when
//! it is surely one object, holds no control byte, writes no key with an escape, and repeats
//! no key at any depth (`checked`): a decoder keeps one of two repeated keys, and which one
//! differs between decoders, so the server could read an argument the policy never saw.
//! Otherwise the call goes on re-encoded from what the policy read, as before.

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::gateway::agent::versions::ENVELOPE_KEYS;
use crate::gateway::json_scan::{has_control, member_count, object_members};

/// What a `tools/call` carried beyond the typed view the pipeline reads.
#[derive(Debug, Default)]
pub struct AsSent {
    /// The params fields the typed view does not model (`task`, a newer revision's).
    pub extra: Map<String, Value>,
    /// The params' own text, when it may be forwarded as written (`checked`).
    pub text: Option<Box<RawValue>>,
}

impl AsSent {
    /// Only the unmodelled fields: the call goes on re-encoded.
    pub fn fields(extra: Map<String, Value>) -> AsSent {
        AsSent { extra, text: None }
    }
}

/// `raw`, when it may be forwarded as written: an object with a `name` (and a `_meta`, if
/// any, that is an object: what `for_server` rewrites), no control byte, no key written with
/// an escape, and as many object members at every depth as the decoder that read it kept
/// (`decoded_members`), i.e. no key repeated anywhere.
pub fn checked(raw: &RawValue, decoded_members: usize) -> Option<Box<RawValue>> {
    let b = raw.get().as_bytes();
    if has_control(b) || member_count(b)? != decoded_members {
        return None;
    }
    let (mut named, mut meta_is_object) = (false, true);
    object_members(b, |key, span| {
        match key {
            b"name" => named = true,
            b"_meta" => meta_is_object = b.get(span.start) == Some(&b'{'),
            _ => {}
        }
        Some(())
    })?;
    (named && meta_is_object).then(|| raw.to_owned())
}

/// The members of every object inside `v`, at every depth (`v`'s own when it is one).
pub fn members_in(v: &Value) -> usize {
    match v {
        Value::Object(m) => members_of(m),
        Value::Array(a) => a.iter().map(members_in).sum(),
        _ => 0,
    }
}

/// `m`'s members and those of every object inside it.
pub fn members_of(m: &Map<String, Value>) -> usize {
    m.len() + m.values().map(members_in).sum::<usize>()
}

/// The params for the server: `text` (a `checked` object) with every `name` member set to
/// `name` and, in `_meta`, the agent's `progressToken` and 2026-07-28 envelope keys removed
/// and `progressToken: progress` added when given. `None` when `text` is not such an object
/// (the caller then re-encodes).
pub fn for_server(text: &str, name: &str, progress: Option<u64>) -> Option<String> {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() + name.len() + 48);
    out.push('{');
    let mut named = false;
    let mut meta_written = false;
    object_members(b, |key, span| {
        if out.len() > 1 {
            out.push(',');
        }
        match key {
            b"name" => {
                named = true;
                out.push_str("\"name\":");
                out.push_str(&serde_json::to_string(name).ok()?);
            }
            b"_meta" => {
                meta_written = true;
                push_meta(&mut out, &text[span], progress)?;
            }
            _ => push_member(&mut out, key, &text[span])?,
        }
        Some(())
    })?;
    if !named {
        return None;
    }
    if let (false, Some(token)) = (meta_written, progress) {
        out.push_str(",\"_meta\":{\"progressToken\":");
        out.push_str(&token.to_string());
        out.push('}');
    }
    out.push('}');
    Some(out)
}

/// Writes `"key":value` as they were written. The key has no escape (`object_members`
/// refuses others), so its bytes between the quotes are its whole spelling.
fn push_member(out: &mut String, key: &[u8], value: &str) -> Option<()> {
    out.push('"');
    out.push_str(std::str::from_utf8(key).ok()?);
    out.push_str("\":");
    out.push_str(value);
    Some(())
}

/// Writes `"_meta":{...}`: the agent's members but its progress token and envelope, then
/// ours. An object left with no member is still written (the agent sent one).
fn push_meta(out: &mut String, meta: &str, progress: Option<u64>) -> Option<()> {
    out.push_str("\"_meta\":{");
    let first = out.len();
    object_members(meta.as_bytes(), |key, span| {
        let dropped = key == b"progressToken" || ENVELOPE_KEYS.iter().any(|k| k.as_bytes() == key);
        if !dropped {
            if out.len() > first {
                out.push(',');
            }
            push_member(out, key, &meta[span])?;
        }
        Some(())
    })?;
    if let Some(token) = progress {
        if out.len() > first {
            out.push(',');
        }
        out.push_str("\"progressToken\":");
        out.push_str(&token.to_string());
    }
    out.push('}');
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// JSON as a tree that may repeat a key, rendered as text by hand.
    #[derive(Debug, Clone)]
    enum J {
        Leaf(&'static str),
        Array(Vec<J>),
        Object(Vec<(&'static str, J)>),
    }

    impl J {
        fn text(&self) -> String {
            match self {
                J::Leaf(t) => t.to_string(),
                J::Array(items) => {
                    let items: Vec<String> = items.iter().map(J::text).collect();
                    format!("[{}]", items.join(","))
                }
                J::Object(members) => {
                    let members: Vec<String> = members
                        .iter()
                        .map(|(k, v)| format!("\"{k}\":{}", v.text()))
                        .collect();
                    format!("{{{}}}", members.join(","))
                }
            }
        }

        fn repeats_a_key(&self) -> bool {
            match self {
                J::Leaf(_) => false,
                J::Array(items) => items.iter().any(J::repeats_a_key),
                J::Object(members) => {
                    let mut keys: Vec<_> = members.iter().map(|(k, _)| *k).collect();
                    keys.sort_unstable();
                    let n = keys.len();
                    keys.dedup();
                    keys.len() != n || members.iter().any(|(_, v)| v.repeats_a_key())
                }
            }
        }
    }

    fn json() -> impl Strategy<Value = J> {
        let leaf = prop::sample::select(vec![
            "1",
            "1.50",
            "1e3",
            "-0",
            "12345678901234567890123",
            "\"x\"",
            "\"\\u00e9\"",
            "\"a\\\"b\"",
            "true",
            "null",
            "{}",
            "[]",
        ])
        .prop_map(J::Leaf);
        leaf.prop_recursive(3, 24, 4, |inner| {
            let key = prop::sample::select(vec!["a", "b", "progressToken", "name"]);
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(J::Array),
                prop::collection::vec((key, inner), 0..4).prop_map(J::Object),
            ]
        })
    }

    /// What the re-encoding path makes of the same params: decoded (a repeated key keeps
    /// one), the name and token made the server's.
    fn reencoded(text: &str, name: &str, progress: Option<u64>) -> Value {
        let mut v: Value = serde_json::from_str(text).unwrap();
        v["name"] = Value::String(name.into());
        if let Some(Value::Object(meta)) = v.get_mut("_meta") {
            meta.remove("progressToken");
            for k in ENVELOPE_KEYS {
                meta.remove(k);
            }
            if let Some(token) = progress {
                meta.insert("progressToken".into(), token.into());
            }
        } else if let Some(token) = progress {
            v["_meta"] = serde_json::json!({ "progressToken": token });
        }
        v
    }

    proptest! {
        // Text that passes the check says to the server what the policy read; text that
        // repeats a key anywhere never passes.
        #[test]
        fn forwarded_text_means_what_the_policy_read(
            arguments in json(),
            meta in proptest::option::of(json()),
            extra in json(),
            progress in proptest::option::of(any::<u64>()),
        ) {
            let mut members = vec![("name", J::Leaf("\"agent__tool\"")), ("arguments", arguments)];
            if let Some(meta) = meta {
                members.insert(0, ("_meta", meta));
            }
            members.push(("future", extra));
            let params = J::Object(members);
            let text = params.text();
            let checked = check(&text);
            if params.repeats_a_key() {
                prop_assert!(checked.is_none(), "{}", text);
            }
            if let Some(text) = checked {
                let out = for_server(text.get(), "tool", progress).unwrap();
                let got: Value = serde_json::from_str(&out).unwrap();
                prop_assert_eq!(got, reencoded(text.get(), "tool", progress));
            }
        }
    }

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_string()).unwrap()
    }

    fn decoded_members(text: &str) -> usize {
        members_in(&serde_json::from_str::<Value>(text).unwrap())
    }

    /// What serde would have made of it re-encoded: the text is kept only when it says the
    /// same thing.
    fn check(text: &str) -> Option<Box<RawValue>> {
        checked(&raw(text), decoded_members(text))
    }

    #[test]
    fn numbers_order_and_unknown_fields_go_on_as_written() {
        let text = r#"{"zzz":{"q":1.50},"name":"read","arguments":{"big":12345678901234567890123,"e":1e3,"z":"a","a":[1,{"k":-0.0}]},"task":{}}"#;
        assert!(check(text).is_some());
        let out = for_server(text, "read_file", None).unwrap();
        assert_eq!(
            out,
            r#"{"zzz":{"q":1.50},"name":"read_file","arguments":{"big":12345678901234567890123,"e":1e3,"z":"a","a":[1,{"k":-0.0}]},"task":{}}"#
        );
    }

    #[test]
    fn the_progress_token_and_envelope_are_ours_the_rest_of_meta_is_theirs() {
        let text = r#"{"_meta":{"x.y/z":1e3,"progressToken":"agent-7","io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"t","arguments":{}}"#;
        assert_eq!(
            for_server(text, "t", Some(42)).unwrap(),
            r#"{"_meta":{"x.y/z":1e3,"progressToken":42},"name":"t","arguments":{}}"#
        );
        assert_eq!(
            for_server(text, "t", None).unwrap(),
            r#"{"_meta":{"x.y/z":1e3},"name":"t","arguments":{}}"#
        );
        // No `_meta` sent: one is added only to carry our token.
        let bare = r#"{"name":"t"}"#;
        assert_eq!(for_server(bare, "t", None).unwrap(), bare);
        assert_eq!(
            for_server(bare, "t", Some(3)).unwrap(),
            r#"{"name":"t","_meta":{"progressToken":3}}"#
        );
    }

    #[test]
    fn a_name_is_written_as_json_whatever_it_holds() {
        let out = for_server(r#"{"name":"a"}"#, "we\"ird\\", None).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["name"], "we\"ird\\");
    }

    /// A repeated key is read one way by the policy and maybe another by the server: such
    /// text is never forwarded as written, at any depth.
    #[test]
    fn a_repeated_key_anywhere_keeps_the_text_from_the_server() {
        for text in [
            r#"{"name":"t","arguments":{"path":"/etc/shadow"},"arguments":{"path":"/ok"}}"#,
            r#"{"name":"t","arguments":{"path":"/etc/shadow","path":"/ok"}}"#,
            r#"{"name":"t","arguments":{"list":[{"p":"/a","p":"/b"}]}}"#,
            r#"{"name":"t","name":"u"}"#,
        ] {
            assert!(check(text).is_none(), "{text}");
        }
    }

    #[test]
    fn escaped_keys_and_control_bytes_keep_the_text_from_the_server() {
        for text in [
            r#"{"name":"t","arguments":{"pa\u0074h":"/etc/shadow"}}"#,
            "{\"name\":\"t\",\n\"arguments\":{}}",
            "{\"name\":\"t\",\"arguments\":{\"a\":\t1}}",
        ] {
            assert!(check(text).is_none(), "{text:?}");
        }
        // An escape inside a value is the value's business: decoded alike by both.
        assert!(check(r#"{"name":"t","arguments":{"p":"\u002e\u002e/x"}}"#).is_some());
    }

    /// `checked` text is what `for_server` can rewrite, and only such text.
    #[test]
    fn only_an_object_with_a_name_is_rewritten() {
        for text in ["[1]", r#"{"arguments":{}}"#, r#"{"name":"t","_meta":[1]}"#] {
            assert!(for_server(text, "t", None).is_none(), "{text}");
            assert!(check(text).is_none(), "{text}");
        }
        assert!(check(r#"{"name":"t","_meta":{}}"#).is_some());
    }
}
