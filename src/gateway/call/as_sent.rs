//! A request's params as the agent wrote them, for the server: the same text with the name
//! the server knows the target by (a tool's, a prompt's) put in place of the agent's, and
//! `_meta.progressToken` replaced by Palisade's; every other byte (number spellings, key
//! order, fields no typed model knows) goes on as sent. Used for `tools/call`, `prompts/get`,
//! `resources/read`, `resources/(un)subscribe` and `completion/complete`.
//!
//! Why: the params used to be decoded into `serde_json::Value`s and encoded again. That
//! re-spelled numbers (`1e3` as `1000.0`; an integer past 2^64 became the nearest float, so
//! the server read a different number than the agent sent), re-ordered keys, dropped fields
//! rmcp's models do not know, and cost three passes over the arguments on every call.
//!
//! Never: forward text whose meaning the policy may not have seen. The text is used only when
//! it is surely one object, holds no control byte, writes no key with an escape, and repeats
//! no key at any depth (`checked`): a decoder keeps one of two repeated keys, and which one
//! differs between decoders, so the server could read an argument the policy never saw.
//! Otherwise the request goes on re-encoded from what the policy read, as before.

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::gateway::agent::versions::ENVELOPE_KEYS;
use crate::gateway::json_scan::{
    has_control, member_count, object_members, push_member, push_with_member,
};

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

/// Where a request's params name their target by a name Palisade rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// In their `name` (`tools/call`, `prompts/get`).
    Top,
    /// In the `name` of their `ref` (`completion/complete` of a prompt).
    InRef,
    /// Nowhere: the target is a URI, the server's own (`resources/read`).
    Nowhere,
}

/// The server's name for the target, and where it goes (`Named`).
#[derive(Debug, Clone, Copy)]
pub enum Rename<'a> {
    Top(&'a str),
    InRef(&'a str),
    Nothing,
}

/// `raw`, when it may be forwarded as written: an object whose target name sits where
/// `named` says (and a `_meta`, if any, that is an object: what `for_server` rewrites), no
/// control byte, no key written with an escape, and as many object members at every depth as
/// the decoder that read it kept (`decoded_members`), i.e. no key repeated anywhere.
pub fn checked(raw: &RawValue, decoded_members: usize, named: Named) -> Option<Box<RawValue>> {
    let b = raw.get().as_bytes();
    if has_control(b) || member_count(b)? != decoded_members {
        return None;
    }
    let (mut found, mut meta_is_object) = (named == Named::Nowhere, true);
    object_members(b, |key, span| {
        match (key, named) {
            (b"name", Named::Top) => found = true,
            (b"ref", Named::InRef) => found = has_member(&b[span], b"name"),
            (b"_meta", _) => meta_is_object = b.get(span.start) == Some(&b'{'),
            _ => {}
        }
        Some(())
    })?;
    (found && meta_is_object).then(|| raw.to_owned())
}

/// Whether `object` (JSON text) is an object with a member `key`.
fn has_member(object: &[u8], key: &[u8]) -> bool {
    let mut found = false;
    let is_object = object_members(object, |k, _| {
        found |= k == key;
        Some(())
    });
    is_object.is_some() && found
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

/// The params for the server: `text` (a `checked` object) with the target's name set as
/// `rename` says and, in `_meta`, the agent's `progressToken` and 2026-07-28 envelope keys
/// removed and `progressToken: progress` added when given. `None` when `text` is not such an
/// object (the caller then re-encodes).
pub fn for_server(text: &str, rename: Rename<'_>, progress: Option<u64>) -> Option<String> {
    let b = text.as_bytes();
    let extra = match rename {
        Rename::Top(n) | Rename::InRef(n) => n.len(),
        Rename::Nothing => 0,
    };
    let mut out = String::with_capacity(text.len() + extra + 48);
    out.push('{');
    let mut named = matches!(rename, Rename::Nothing);
    let mut meta_written = false;
    object_members(b, |key, span| {
        if out.len() > 1 {
            out.push(',');
        }
        match (key, rename) {
            (b"name", Rename::Top(name)) => {
                named = true;
                push_name(&mut out, name)?;
            }
            (b"ref", Rename::InRef(name)) => {
                named = true;
                out.push_str("\"ref\":");
                push_renamed(&mut out, &text[span], name)?;
            }
            (b"_meta", _) => {
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

/// Writes `"name":NAME`, the name as JSON whatever it holds.
fn push_name(out: &mut String, name: &str) -> Option<()> {
    out.push_str("\"name\":");
    out.push_str(&serde_json::to_string(name).ok()?);
    Some(())
}

/// Writes `object` (JSON text) with its `name` set to `name`, every other member as written.
fn push_renamed(out: &mut String, object: &str, name: &str) -> Option<()> {
    let name = serde_json::to_string(name).ok()?;
    push_with_member(out, object, "name", &name, false)?.then_some(())
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
                let out = for_server(text.get(), Rename::Top("tool"), progress).unwrap();
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
        checked(&raw(text), decoded_members(text), Named::Top)
    }

    #[test]
    fn numbers_order_and_unknown_fields_go_on_as_written() {
        let text = r#"{"zzz":{"q":1.50},"name":"read","arguments":{"big":12345678901234567890123,"e":1e3,"z":"a","a":[1,{"k":-0.0}]},"task":{}}"#;
        assert!(check(text).is_some());
        let out = for_server(text, Rename::Top("read_file"), None).unwrap();
        assert_eq!(
            out,
            r#"{"zzz":{"q":1.50},"name":"read_file","arguments":{"big":12345678901234567890123,"e":1e3,"z":"a","a":[1,{"k":-0.0}]},"task":{}}"#
        );
    }

    #[test]
    fn the_progress_token_and_envelope_are_ours_the_rest_of_meta_is_theirs() {
        let text = r#"{"_meta":{"x.y/z":1e3,"progressToken":"agent-7","io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"t","arguments":{}}"#;
        assert_eq!(
            for_server(text, Rename::Top("t"), Some(42)).unwrap(),
            r#"{"_meta":{"x.y/z":1e3,"progressToken":42},"name":"t","arguments":{}}"#
        );
        assert_eq!(
            for_server(text, Rename::Top("t"), None).unwrap(),
            r#"{"_meta":{"x.y/z":1e3},"name":"t","arguments":{}}"#
        );
        // No `_meta` sent: one is added only to carry our token.
        let bare = r#"{"name":"t"}"#;
        assert_eq!(for_server(bare, Rename::Top("t"), None).unwrap(), bare);
        assert_eq!(
            for_server(bare, Rename::Top("t"), Some(3)).unwrap(),
            r#"{"name":"t","_meta":{"progressToken":3}}"#
        );
    }

    #[test]
    fn a_name_is_written_as_json_whatever_it_holds() {
        let out = for_server(r#"{"name":"a"}"#, Rename::Top("we\"ird\\"), None).unwrap();
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

    /// A completion's prompt is named inside its `ref`; a resource's URI is its server's own,
    /// so nothing is renamed, and the text needs no name to go as written.
    #[test]
    fn a_prompt_ref_is_renamed_inside_and_a_uri_is_left_alone() {
        let complete = r#"{"ref":{"type":"ref/prompt","name":"s__p","x":1.50},"argument":{"name":"a","value":"1e3"}}"#;
        let n = decoded_members(complete);
        assert!(checked(&raw(complete), n, Named::InRef).is_some());
        assert_eq!(
            for_server(complete, Rename::InRef("p"), Some(7)).unwrap(),
            r#"{"ref":{"type":"ref/prompt","name":"p","x":1.50},"argument":{"name":"a","value":"1e3"},"_meta":{"progressToken":7}}"#
        );
        // A `ref` without a name, or none at all, is not what InRef rewrites.
        for text in [
            r#"{"ref":{"type":"ref/prompt"}}"#,
            r#"{"ref":[1]}"#,
            r#"{"argument":{}}"#,
        ] {
            assert!(
                checked(&raw(text), decoded_members(text), Named::InRef).is_none(),
                "{text}"
            );
            assert!(
                for_server(text, Rename::InRef("p"), None).is_none(),
                "{text}"
            );
        }
        let read = r#"{"uri":"file:///w/a.txt","z":12345678901234567890123}"#;
        assert!(checked(&raw(read), decoded_members(read), Named::Nowhere).is_some());
        assert_eq!(for_server(read, Rename::Nothing, None).unwrap(), read);
        // Nor does a top-level `name` get touched when the target is a URI.
        let named = r#"{"uri":"x://y","name":"kept"}"#;
        assert_eq!(for_server(named, Rename::Nothing, None).unwrap(), named);
    }

    /// `checked` text is what `for_server` can rewrite, and only such text.
    #[test]
    fn only_an_object_with_a_name_is_rewritten() {
        for text in ["[1]", r#"{"arguments":{}}"#, r#"{"name":"t","_meta":[1]}"#] {
            assert!(for_server(text, Rename::Top("t"), None).is_none(), "{text}");
            assert!(check(text).is_none(), "{text}");
        }
        assert!(check(r#"{"name":"t","_meta":{}}"#).is_some());
    }
}
