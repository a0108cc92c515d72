//! What a successful `tools/call` result says about itself, read without decoding it: its
//! top-level `isError` and whether it carries a `task`. The answer decides whether the
//! result is relayed as the server's bytes or decoded for the stages (`answer::received`).
//!
//! Why not serde: the input is a result the peer has already validated as JSON (a
//! `RawValue`), and a serde probe scans every byte of it again, strings included, which was
//! the largest user-space cost of relaying a 1 MiB result (`docs/benchmarks.md`). Here
//! strings are skipped with `memchr` from quote to quote, so a large text costs a memory scan.
//!
//! Never: guess. A key written with an escape (`"is\u0045rror"` is `isError` to a JSON
//! decoder), a repeated key, an `isError` that is not `true`, `false` or `null`, or anything
//! the scan does not expect gives `None`, and the caller asks serde, which decides as before.

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
    let mut out = ResultProbe::default();
    let (mut seen_error, mut seen_task) = (false, false);
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return rest_is_blank(b, i + 1).then_some(out);
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(b, i)?;
        let key = &b[i + 1..key_end - 1];
        if key.contains(&b'\\') {
            return None;
        }
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let value_start = skip_ws(b, i + 1);
        let value_end = value_end(b, value_start)?;
        let value = &b[value_start..value_end];
        match key {
            b"isError" => {
                if std::mem::replace(&mut seen_error, true) {
                    return None;
                }
                out.is_error = match value {
                    b"true" => Some(true),
                    b"false" => Some(false),
                    b"null" => None,
                    _ => return None,
                };
            }
            b"task" => {
                if std::mem::replace(&mut seen_task, true) {
                    return None;
                }
                // serde reads `"task": null` as no task.
                out.task = value != b"null";
            }
            _ => {}
        }
        i = skip_ws(b, value_end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return rest_is_blank(b, i + 1).then_some(out),
            _ => return None,
        }
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

fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).copied().is_some_and(is_ws) {
        i += 1;
    }
    i
}

fn rest_is_blank(b: &[u8], i: usize) -> bool {
    skip_ws(b, i) == b.len()
}

/// The index just past the closing quote of the string opening at `start` (a `"`).
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut j = start + 1;
    loop {
        let k = j + memchr::memchr2(b'"', b'\\', b.get(j..)?)?;
        if b[k] == b'"' {
            return Some(k + 1);
        }
        // An escape: the next byte is escaped whatever it is (`\"`, `\\`, `\u...`).
        j = k + 2;
    }
}

/// The index just past the value starting at `start`.
fn value_end(b: &[u8], start: usize) -> Option<usize> {
    match *b.get(start)? {
        b'"' => string_end(b, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = start;
            loop {
                match *b.get(j)? {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            // A number or a literal: up to the next delimiter.
            let len = b[start..]
                .iter()
                .position(|&c| matches!(c, b',' | b'}' | b']') || is_ws(c))
                .unwrap_or(b.len() - start);
            (len > 0).then_some(start + len)
        }
    }
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
