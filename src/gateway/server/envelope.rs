//! What one line of a server's stdout is, read from its envelope only (`jsonrpc`, `id`,
//! `method`, and where `params`, `result` and `error` lie): pure, no I/O, shared by the peer's
//! dispatch (`peer/dispatch.rs`), the tap's progress filter (`tap.rs`) and the fuzz and property
//! tests.
//!
//! Why a scanner before serde: every response, a 1 MiB `read` result included, crossed a
//! serde parse of the whole line only to learn where its `id` and `result` are; that parse
//! (serde's string scan) was the largest user-space cost of relaying a large result. The
//! scanner reads a plain response (`{"jsonrpc":"2.0","id":…,"result":…}`, members in any
//! order, unknown members allowed) in one pass that checks the whole line is JSON as serde
//! reads it: control bytes are looked for in one pass over the line (or ruled out with the
//! UTF-8 check, for a printable line: `LineText`), strings are skipped
//! with `memchr` from quote or backslash to the next, every escape is checked, numbers and
//! literals follow the grammar. The scanning itself is `gateway/json_scan.rs`; `tests/props.rs`
//! holds it to serde's answer.
//!
//! Never: guess. Anything the scanner is not sure of (a control byte anywhere but the line's
//! end, a key written with an escape, a repeated envelope member, a `null` id or result, a
//! `method` or `error` member, a `jsonrpc` that is not the literal `"2.0"`, anything that is
//! not valid JSON) gives `None`, and serde decides exactly as it did before the scanner.

use std::ops::Range;

use rmcp::model::ErrorData;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::gateway::call::probe::{probe_at, ResultProbe};
use crate::gateway::json_scan::{
    has_control, object_members_at, printable_ascii, skip_ws, value_end,
};

/// What one line is, once its envelope is read. Spans borrow the line.
#[derive(Debug)]
pub enum Kind<'a> {
    Response {
        /// The id's JSON text.
        id: &'a str,
        /// The raw `result` (a slice of the line), or the `error` as the envelope read it.
        reply: Result<&'a str, ErrorData>,
        /// What a result object says of itself (`isError`, `task`), read in the same walk
        /// as the envelope; `None` when the scanner did not read the line, the result is
        /// no object, or the probe was unsure (the caller then probes the result itself).
        said: Option<ResultProbe>,
    },
    Request {
        id: &'a RawValue,
        method: &'a str,
        params: Option<&'a RawValue>,
    },
    Notification {
        method: &'a str,
        params: Option<&'a RawValue>,
    },
    Invalid(String),
}

/// Classifies a line (the fuzz target and unit tests call it directly).
pub fn classify(line: &[u8]) -> Kind<'_> {
    match std::str::from_utf8(line) {
        Ok(text) => classify_text(text),
        Err(_) => Kind::Invalid("not UTF-8".into()),
    }
}

/// Classifies a line known to be UTF-8: the scanner first, serde where it is not sure.
pub fn classify_text(text: &str) -> Kind<'_> {
    kind_of(text, response(text))
}

/// A response read by the scanner (`spans`), else what serde makes of `text`.
fn kind_of(text: &str, spans: Option<ResponseSpans>) -> Kind<'_> {
    match spans {
        Some(spans) => Kind::Response {
            id: &text[spans.id],
            reply: Ok(&text[spans.result]),
            said: spans.said,
        },
        None => classify_serde(text),
    }
}

/// A server's line as text, checked for UTF-8 once. Most lines are printable ASCII before
/// their newline, which one pass shows (`json_scan::printable_ascii`): such a line is UTF-8
/// and holds no control byte, so neither `str::from_utf8` nor the scanner's control-byte
/// pass walks it again. A 1 MiB result was walked by both (docs/benchmarks.md).
#[derive(Debug)]
pub struct LineText {
    text: String,
    /// Printable ASCII (0x20 to 0x7F, DEL included, which JSON allows in strings) before
    /// the newline: no control byte for `response` to look for.
    printable: bool,
}

impl LineText {
    /// The line as text; `Err` gives it back when it is not UTF-8.
    pub fn new(line: Vec<u8>) -> Result<LineText, Vec<u8>> {
        if printable_ascii(line.strip_suffix(b"\n").unwrap_or(&line)) {
            // SAFETY: every byte but a final `\n` (0x0A, which `strip_suffix` matched) was
            // just checked to be in 0x20..0x80; so every byte is ASCII, and ASCII is UTF-8.
            let text = unsafe { String::from_utf8_unchecked(line) };
            return Ok(LineText {
                text,
                printable: true,
            });
        }
        match String::from_utf8(line) {
            Ok(text) => Ok(LineText {
                text,
                printable: false,
            }),
            Err(e) => Err(e.into_bytes()),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn into_string(self) -> String {
        self.text
    }

    /// What the line is, as [`classify_text`] says, without its control-byte pass when the
    /// line is printable.
    pub fn classify(&self) -> Kind<'_> {
        let spans = match self.printable {
            true => response_members(&self.text),
            false => response(&self.text),
        };
        kind_of(&self.text, spans)
    }
}

/// The parts of a line serde reads; everything else stays unparsed.
#[derive(Deserialize)]
struct Envelope<'a> {
    jsonrpc: std::borrow::Cow<'a, str>,
    /// Present at all, even as `null`: a message with an `id` member is no notification
    /// (an `Option` alone reads `"id": null` as absent).
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    /// Borrowed: a method name with escapes in it is not one we know (the line is invalid).
    #[serde(borrow, default)]
    method: Option<&'a str>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<ErrorData>,
}

/// A member that is present is `Some`, whatever its value (`null` included).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

/// Classifies a line with serde alone (what [`classify_text`] falls back to, and the
/// property test's reference).
pub fn classify_serde(text: &str) -> Kind<'_> {
    match serde_json::from_str::<Envelope<'_>>(text) {
        Err(e) => Kind::Invalid(e.to_string()),
        Ok(env) if env.jsonrpc != "2.0" => Kind::Invalid("jsonrpc is not \"2.0\"".into()),
        Ok(env) => match (env.id, env.method) {
            (Some(id), Some(method)) => Kind::Request {
                id,
                method,
                params: env.params,
            },
            (None, Some(method)) => Kind::Notification {
                method,
                params: env.params,
            },
            (Some(id), None) => match (env.result, env.error) {
                (_, Some(e)) => Kind::Response {
                    id: id.get(),
                    reply: Err(e),
                    said: None,
                },
                (Some(r), None) => Kind::Response {
                    id: id.get(),
                    reply: Ok(r.get()),
                    said: None,
                },
                (None, None) => Kind::Invalid("a response with neither result nor error".into()),
            },
            (None, None) => {
                Kind::Invalid("neither a request, a notification nor a response".into())
            }
        },
    }
}

/// Where the `id` and `result` of a plain response lie in its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseSpans {
    pub id: Range<usize>,
    pub result: Range<usize>,
    /// The result object's `isError` and `task`, when the probe was sure.
    pub said: Option<ResultProbe>,
}

/// The spans of a plain response's `id` and `result`, when the whole line is surely valid
/// JSON that serde reads as a response with that id and that result; `None` when unsure.
pub fn response(line: &str) -> Option<ResponseSpans> {
    let b = line.as_bytes();
    // A control byte is invalid in a string and rare between tokens; only the line's own
    // end is expected. With none, strings can be skipped by looking for `"` and `\` only.
    let body = b.strip_suffix(b"\n").unwrap_or(b);
    if has_control(body) {
        return None;
    }
    response_members(line)
}

/// [`response`] for a line already known to hold no control byte before its newline.
fn response_members(line: &str) -> Option<ResponseSpans> {
    let b = line.as_bytes();
    let (mut jsonrpc, mut id, mut params, mut result) = (false, None, false, None);
    let mut said = None;
    let end = object_members_at(b, skip_ws(b, 0), |key, start| {
        if key.contains(&b'\\') {
            return None;
        }
        // The result object's own members are read on the way (`probe_at`): a large
        // result is walked once here, not again by `call::probe`.
        let probed = (key == b"result").then(|| probe_at(b, start)).flatten();
        let end = match probed {
            Some((end, reading)) => {
                said = reading;
                end
            }
            // Another member, or a result that is no object (or no valid one, which
            // `value_end` then refuses).
            None => value_end(b, start)?,
        };
        let span = start..end;
        let value = &b[span.clone()];
        match key {
            b"jsonrpc" if !jsonrpc && value == br#""2.0""# => jsonrpc = true,
            b"id" if id.is_none() && value != b"null" => id = Some(span),
            b"params" if !params => params = true,
            b"result" if result.is_none() && value != b"null" => result = Some(span),
            // A repeat, an odd value, or a member a plain response does not have.
            b"jsonrpc" | b"id" | b"params" | b"result" | b"method" | b"error" => return None,
            _ => {}
        }
        Some(end)
    })?;
    if !jsonrpc || skip_ws(b, end) != b.len() {
        return None;
    }
    Some(ResponseSpans {
        id: id?,
        result: result?,
        said,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(line: &str) -> Option<(&str, &str)> {
        response(line).map(|s| (&line[s.id], &line[s.result]))
    }

    #[test]
    fn plain_responses_are_read_without_serde() {
        assert_eq!(
            spans("{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"x\":1.0,\"a\":[1,-2e+5,true,null,\"\\u00e9\\n\"]}}\n"),
            Some(("3", r#"{"x":1.0,"a":[1,-2e+5,true,null,"\u00e9\n"]}"#))
        );
        assert_eq!(
            spans(r#" { "result" : [] , "x": {"id":9}, "id" : "a\"b" , "jsonrpc" : "2.0" } "#),
            Some((r#""a\"b""#, "[]"))
        );
    }

    #[test]
    fn anything_it_cannot_be_sure_of_is_left_to_serde() {
        for doubtful in [
            // Not a plain response.
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"1.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2\u002e0","id":1,"result":{}}"#,
            r#"{"id":1,"result":{}}"#,
            // Escaped or repeated envelope keys.
            r#"{"jsonrpc":"2.0","i\u0064":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"result":{}}"#,
            // Control bytes: a tab between tokens (valid, left to serde) or in a string.
            "{\"jsonrpc\":\"2.0\",\t\"id\":1,\"result\":{}}",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"a\u{1}b\"}",
            // Not JSON.
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":1,}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":[1 2]}"#,
            r#"{"jsonrpc":"2.0","id":01,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1.,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":"\x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":"\u12G4"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":tru}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}} x"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":"abc}"#,
            "",
        ] {
            assert_eq!(response(doubtful), None, "{doubtful}");
        }
    }

    #[test]
    fn agrees_with_serde_wherever_it_answers() {
        for line in [
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"\\\"}\\\\\"}]}}\n",
            r#"{"result":{"isError":false},"jsonrpc":"2.0","params":[1],"id":"x-1"}"#,
            r#"{"jsonrpc":"2.0","id":-0.5e-3,"result":0}"#,
        ] {
            let fast = spans(line).unwrap();
            match classify_serde(line) {
                Kind::Response {
                    id, reply: Ok(r), ..
                } => assert_eq!(fast, (id, r), "{line}"),
                other => panic!("serde read {line} as {other:?}"),
            }
        }
    }

    /// Regression (stop 20): `"id": null` read as no id at all, so a line with a `null` id
    /// and a method passed as a notification; a message with an `id` member, even `null`,
    /// is none (the tap's progress filter already treated it so).
    #[test]
    fn a_null_id_is_an_id_member_not_a_notification() {
        let line = br#"{"jsonrpc":"2.0","id":null,"method":"notifications/message","params":{}}"#;
        assert!(
            matches!(classify(line), Kind::Request { id, .. } if id.get() == "null"),
            "{:?}",
            classify(line)
        );
        let line = br#"{"jsonrpc":"2.0","id":null,"result":{}}"#;
        assert!(
            matches!(classify(line), Kind::Response { id: "null", .. }),
            "{:?}",
            classify(line)
        );
    }
}
