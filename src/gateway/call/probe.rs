//! What a successful `tools/call` result says about itself, read without decoding it: its
//! top-level `isError` and whether it carries a `task`. The answer decides whether the
//! result is relayed as the server's bytes or decoded for the stages (`answer::received`).
//!
//! Why not serde: the input is a result the peer has already validated as JSON (a
//! `RawValue`), and a serde probe scans every byte of it again, strings included, which was
//! the largest user-space cost of relaying a 1 MiB result (`docs/benchmarks.md`). The
//! members are read with the envelope's scanner (`gateway/json_scan.rs`): strings are
//! skipped with `memchr` from quote to quote, so a large text costs a memory scan. A
//! server's response is probed as its envelope is read (`probe_at`), in that same walk.
//!
//! Never: guess. A key written with an escape (`"is\u0045rror"` is `isError` to a JSON
//! decoder), a repeated key, an `isError` that is not `true`, `false` or `null`, or anything
//! the scan does not expect gives `None`, and the caller asks serde, which decides as before.

use crate::gateway::json_scan::{object_members_at, skip_ws, value_end};

/// What the scan found at the top level of a result object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResultProbe {
    /// `isError`: absent and `null` are both `None`, as serde reads an `Option<bool>`.
    pub is_error: Option<bool>,
    /// A `task` member is present (any value).
    pub task: bool,
}

/// Reads the top-level `isError` and `task` of a JSON object, or `None` when it cannot be sure.
pub fn probe(object: &str) -> Option<ResultProbe> {
    let b = object.as_bytes();
    let (end, said) = probe_at(b, skip_ws(b, 0))?;
    if skip_ws(b, end) != b.len() {
        return None;
    }
    said
}

/// Walks the object whose `{` is at `start` in `b`, reading its top-level `isError` and
/// `task` on the way: the index just past the object, and the reading (`None` when unsure).
/// `None` when `b` holds no surely valid object there. The envelope scanner walks a
/// response's result with it (`server::envelope`), so a large result is walked once, not
/// once for the envelope and again by [`probe`].
pub fn probe_at(b: &[u8], start: usize) -> Option<(usize, Option<ResultProbe>)> {
    let mut reader = ProbeReader::default();
    let end = object_members_at(b, start, |key, at| {
        let end = value_end(b, at)?;
        reader.member(key, &b[at..end]);
        Some(end)
    })?;
    Some((end, reader.finish()))
}

/// The probe's reading, one top-level member at a time.
#[derive(Debug, Default)]
struct ProbeReader {
    said: ResultProbe,
    seen_error: bool,
    seen_task: bool,
    /// A member the probe cannot be sure of: an escaped key, a repeat, an odd `isError`.
    unsure: bool,
}

impl ProbeReader {
    /// One top-level member: its key as written (escapes included) and its value's text.
    fn member(&mut self, key: &[u8], value: &[u8]) {
        if key.contains(&b'\\') {
            self.unsure = true;
            return;
        }
        match key {
            b"isError" if !std::mem::replace(&mut self.seen_error, true) => {
                self.said.is_error = match value {
                    b"true" => Some(true),
                    b"false" => Some(false),
                    b"null" => None,
                    _ => {
                        self.unsure = true;
                        None
                    }
                };
            }
            // serde reads `"task": null` as no task.
            b"task" if !std::mem::replace(&mut self.seen_task, true) => {
                self.said.task = value != b"null"
            }
            // A repeated `isError` or `task`.
            b"isError" | b"task" => self.unsure = true,
            _ => {}
        }
    }

    /// What the members said, when every one was read surely.
    fn finish(self) -> Option<ResultProbe> {
        (!self.unsure).then_some(self.said)
    }
}

/// The same answer from serde, for what [`probe`] leaves open (and to check it against).
pub fn serde_probe(object: &str) -> Option<ResultProbe> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Probe {
        #[serde(default)]
        is_error: Option<bool>,
        #[serde(default)]
        task: Option<serde::de::IgnoredAny>,
    }
    let p: Probe = serde_json::from_str(object).ok()?;
    Some(ResultProbe {
        is_error: p.is_error,
        task: p.task.is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_top_level_only() {
        let r = probe(
            r#"{"content":[{"type":"text","text":"isError \" true","isError":true}],"isError":false}"#,
        );
        assert_eq!(
            r,
            Some(ResultProbe {
                is_error: Some(false),
                task: false
            })
        );
        let r = probe(r#" { "task" : {"taskId":"t"} , "isError" : true } "#);
        assert_eq!(
            r,
            Some(ResultProbe {
                is_error: Some(true),
                task: true
            })
        );
        assert_eq!(probe("{}"), Some(ResultProbe::default()));
        assert_eq!(
            probe(r#"{"isError":null,"n":-1.5e3,"a":[[],{}]}"#),
            Some(ResultProbe::default())
        );
    }

    #[test]
    fn anything_it_cannot_be_sure_of_is_left_to_serde() {
        for doubtful in [
            r#"{"is\u0045rror":true}"#,
            r#"{"isError":false,"isError":true}"#,
            r#"{"isError":"yes"}"#,
            r#"{"isError":1}"#,
            r#"{"task":1,"task":2}"#,
            r#"[1]"#,
            r#"{"a":1"#,
            r#"{"a":"unterminated}"#,
            r#"{"a":1} trailing"#,
            r#"{"a":]}"#,
            "",
        ] {
            assert_eq!(probe(doubtful), None, "{doubtful}");
        }
    }

    #[test]
    fn agrees_with_serde_wherever_it_answers() {
        let cases = [
            r#"{"content":[],"isError":true}"#,
            r#"{"content":[{"type":"text","text":"a\\\"b\\"}],"structuredContent":{"isError":true}}"#,
            r#"{"_meta":{"k":"}"},"task":null}"#,
            r#"{"task":{"taskId":"x","status":"working"}}"#,
            r#"{"isError":false,"x":"\u00e9\n"}"#,
        ];
        for c in cases {
            let ours = probe(c);
            assert!(ours.is_some(), "{c}");
            assert_eq!(ours, serde_probe(c), "{c}");
        }
    }
}
