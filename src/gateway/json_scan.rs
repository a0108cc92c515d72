//! JSON text scanned without decoding it: where a value ends, and the members of an object,
//! for the two places that must learn a little about a large message without serde reading
//! every byte of it: the envelope of a server's line (`server/envelope.rs`) and the
//! top-level `isError` and `task` of a result (`call/probe.rs`). Pure, no allocation but the
//! stack of open containers.
//!
//! Strings are skipped with `memchr` from a quote or backslash to the next; every escape,
//! number and literal is checked against JSON's grammar, so a value this finds the end of is
//! one serde reads too, given that the text holds no control byte (`has_control`, or
//! `printable_ascii` for a line that is all printable ASCII, checked once per line by the
//! caller). `tests/props.rs` holds both users to serde's answer.
//!
//! Never: guess. Whatever the scan does not expect gives `None`, and the caller asks serde.

use std::ops::Range;

/// True when a byte below 0x20 occurs: one pass the compiler vectorizes (a chunk at a time,
/// no early exit inside a chunk).
pub fn has_control(b: &[u8]) -> bool {
    const CHUNK: usize = 64;
    let hit = |c: &[u8]| c.iter().fold(0u8, |acc, &x| acc | u8::from(x < 0x20)) != 0;
    let mut chunks = b.chunks_exact(CHUNK);
    for c in &mut chunks {
        if hit(c) {
            return true;
        }
    }
    hit(chunks.remainder())
}

/// True when every byte is printable ASCII (0x20 to 0x7F, DEL included). Such text is UTF-8 and
/// holds no control byte, so this one pass answers both `str::from_utf8` and `has_control` for the
/// lines most servers write (JSON escapes control characters, and many servers escape the
/// rest). Vectorized like `has_control`: one wrapping subtraction and one comparison a byte.
pub fn printable_ascii(b: &[u8]) -> bool {
    const CHUNK: usize = 64;
    let miss = |c: &[u8]| {
        c.iter()
            .fold(0u8, |acc, &x| acc | u8::from(x.wrapping_sub(0x20) >= 0x60))
            != 0
    };
    let mut chunks = b.chunks_exact(CHUNK);
    for c in &mut chunks {
        if miss(c) {
            return false;
        }
    }
    !miss(chunks.remainder())
}

/// Writes `"key":value` as they were written. The key has no escape (`object_members`
/// refuses others), so its bytes between the quotes are its whole spelling.
pub fn push_member(out: &mut String, key: &[u8], value: &str) -> Option<()> {
    out.push('"');
    out.push_str(std::str::from_utf8(key).ok()?);
    out.push_str("\":");
    out.push_str(value);
    Some(())
}

/// Writes `object` (an object's JSON text) with member `key`'s value replaced by `value`
/// (JSON text) wherever it occurs, every other member as written; when `key` is absent and
/// `add` is set, it is added last. Answers whether `key` was present; `None` when `object`
/// is not an object `object_members` can walk (what was written of it is then garbage).
pub fn push_with_member(
    out: &mut String,
    object: &str,
    key: &str,
    value: &str,
    add: bool,
) -> Option<bool> {
    out.push('{');
    let first = out.len();
    let mut found = false;
    object_members(object.as_bytes(), |k, span| {
        if out.len() > first {
            out.push(',');
        }
        if k == key.as_bytes() {
            found = true;
            push_member(out, k, value)
        } else {
            push_member(out, k, object.get(span)?)
        }
    })?;
    if add && !found {
        if out.len() > first {
            out.push(',');
        }
        push_member(out, key.as_bytes(), value)?;
    }
    out.push('}');
    Some(found)
}

/// `object` (an object's JSON text) as written, with each of `members` (key, JSON text)
/// that it lacks added at its end. `None` when `object` is not an object `object_members`
/// can walk.
pub fn with_absent(object: &str, members: &[(&str, &str)]) -> Option<String> {
    let mut present = vec![false; members.len()];
    let mut any = false;
    object_members(object.as_bytes(), |k, _| {
        any = true;
        for (seen, (key, _)) in present.iter_mut().zip(members) {
            *seen |= k == key.as_bytes();
        }
        Some(())
    })?;
    let body = object.trim_end().strip_suffix('}')?;
    let mut out = String::with_capacity(object.len() + 64);
    out.push_str(body);
    for (_, (key, value)) in present.iter().zip(members).filter(|(seen, _)| !**seen) {
        if any {
            out.push(',');
        }
        any = true;
        push_member(&mut out, key.as_bytes(), value)?;
    }
    out.push('}');
    Some(out)
}

/// Visits the members of the object that is the whole of `b` (whitespace around it
/// allowed), each as its key's bytes and its value's span, in order. `None` when `b` is not
/// surely such an object, when a key is written with an escape (`"is\u0045rror"` is
/// `isError` to a decoder, not to a byte comparison), or when `visit` answers `None`.
pub fn object_members(
    b: &[u8],
    mut visit: impl FnMut(&[u8], Range<usize>) -> Option<()>,
) -> Option<()> {
    let end = object_members_at(b, skip_ws(b, 0), |key, start| {
        if key.contains(&b'\\') {
            return None;
        }
        let end = value_end(b, start)?;
        visit(key, start..end)?;
        Some(end)
    })?;
    (skip_ws(b, end) == b.len()).then_some(())
}

/// Walks the object whose `{` is at `start`: for each member, `walk` gets its key's bytes as
/// written (escapes included) and the index where its value starts, and answers the index
/// just past that value, having walked it as it needs (`value_end`, or a walk of its own
/// that reads inside it on the way). The index just past the closing `}`; `None` when the
/// object is not surely valid or `walk` answers `None`.
pub fn object_members_at(
    b: &[u8],
    start: usize,
    mut walk: impl FnMut(&[u8], usize) -> Option<usize>,
) -> Option<usize> {
    if b.get(start) != Some(&b'{') {
        return None;
    }
    let mut i = skip_ws(b, start + 1);
    if b.get(i) == Some(&b'}') {
        return Some(i + 1);
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(b, i)?;
        let key = &b[i + 1..key_end - 1];
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let end = walk(key, skip_ws(b, i + 1))?;
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return Some(i + 1),
            _ => return None,
        }
    }
}

pub fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The index just past the closing quote of the string opening at `start` (a `"`); every
/// escape checked as serde checks it (control bytes were ruled out before).
pub fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut j = start + 1;
    loop {
        let k = j + memchr::memchr2(b'"', b'\\', b.get(j..)?)?;
        if b[k] == b'"' {
            return Some(k + 1);
        }
        match *b.get(k + 1)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => j = k + 2,
            b'u' => {
                let hex = b.get(k + 2..k + 6)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                j = k + 6;
            }
            _ => return None,
        }
    }
}

fn digits_end(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

/// The index just past the number starting at `start` (JSON's grammar: no leading zero, a
/// digit after `.` and after the exponent's sign).
fn number_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match *b.get(i)? {
        b'0' => {
            i += 1;
            if b.get(i).is_some_and(u8::is_ascii_digit) {
                return None;
            }
        }
        b'1'..=b'9' => i = digits_end(b, i + 1),
        _ => return None,
    }
    if b.get(i) == Some(&b'.') {
        let j = digits_end(b, i + 1);
        if j == i + 1 {
            return None;
        }
        i = j;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let j = digits_end(b, i);
        if j == i {
            return None;
        }
        i = j;
    }
    Some(i)
}

/// The start of a member's value: the key at `i` (a string, its text inside the quotes
/// shown to `key`), a colon, whitespace.
fn member_value(b: &[u8], i: usize, key: &mut impl FnMut(&[u8]) -> Option<()>) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let key_end = string_end(b, i)?;
    key(&b[i + 1..key_end - 1])?;
    let i = skip_ws(b, key_end);
    if b.get(i) != Some(&b':') {
        return None;
    }
    Some(skip_ws(b, i + 1))
}

/// The index just past the value starting at `start`, the whole value checked.
pub fn value_end(b: &[u8], start: usize) -> Option<usize> {
    scan(b, start, &mut |_| Some(()))
}

/// How many object members the value that is the whole of `b` holds, at every depth.
/// `None` when `b` is not surely one JSON value or a key is written with an escape.
///
/// Why: comparing it with the members a decoder kept tells whether any object repeated a
/// key (a decoder keeps one of the two, silently), without a decoder of our own.
pub fn member_count(b: &[u8]) -> Option<usize> {
    let mut n = 0usize;
    let start = skip_ws(b, 0);
    let end = scan(b, start, &mut |key| {
        if key.contains(&b'\\') {
            return None;
        }
        n += 1;
        Some(())
    })?;
    (skip_ws(b, end) == b.len()).then_some(n)
}

/// `value_end`, showing every object key met on the way to `key` (which may stop the scan).
fn scan(b: &[u8], start: usize, key: &mut impl FnMut(&[u8]) -> Option<()>) -> Option<usize> {
    // The open arrays and objects, innermost last.
    let mut open: Vec<u8> = Vec::new();
    let mut i = start;
    loop {
        // A value starts at `i`.
        match *b.get(i)? {
            b'"' => i = string_end(b, i)?,
            b'-' | b'0'..=b'9' => i = number_end(b, i)?,
            b't' | b'f' | b'n' => {
                let word: &[u8] = match b[i] {
                    b't' => b"true",
                    b'f' => b"false",
                    _ => b"null",
                };
                if !b[i..].starts_with(word) {
                    return None;
                }
                i += word.len();
            }
            b'[' => {
                i = skip_ws(b, i + 1);
                if b.get(i) == Some(&b']') {
                    i += 1;
                } else {
                    open.push(b'[');
                    continue;
                }
            }
            b'{' => {
                i = skip_ws(b, i + 1);
                if b.get(i) == Some(&b'}') {
                    i += 1;
                } else {
                    open.push(b'{');
                    i = member_value(b, i, key)?;
                    continue;
                }
            }
            _ => return None,
        }
        // A value ended at `i`: close what it ends, or go on to the next one.
        loop {
            let Some(&inner) = open.last() else {
                return Some(i);
            };
            i = skip_ws(b, i);
            match (*b.get(i)?, inner) {
                (b',', b'[') => {
                    i = skip_ws(b, i + 1);
                    break;
                }
                (b',', _) => {
                    i = member_value(b, skip_ws(b, i + 1), key)?;
                    break;
                }
                (b']', b'[') | (b'}', b'{') => {
                    open.pop();
                    i += 1;
                }
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_ascii_is_every_byte_from_space_to_del() {
        for x in 0..=255u8 {
            let want = (0x20..0x80).contains(&x);
            // Alone, at the end of a full chunk, and in the remainder after one.
            for at in [0, 63, 64, 100] {
                let mut b = vec![b'y'; at + 1];
                b[at] = x;
                assert_eq!(printable_ascii(&b), want, "byte {x:#x} at {at}");
                if want {
                    assert!(std::str::from_utf8(&b).is_ok() && !has_control(&b));
                }
            }
        }
        // A bad byte in the first chunk of a longer line.
        for bad in [0x00, 0x1f, 0x80, 0xff] {
            let mut b = vec![b'y'; 200];
            b[3] = bad;
            assert!(!printable_ascii(&b), "byte {bad:#x} early in 200");
        }
        assert!(printable_ascii(b""));
        assert!(
            !printable_ascii("é".as_bytes()),
            "UTF-8 beyond ASCII takes the full checks"
        );
    }

    fn with(object: &str, key: &str, value: &str, add: bool) -> Option<(String, bool)> {
        let mut out = String::new();
        let found = push_with_member(&mut out, object, key, value, add)?;
        Some((out, found))
    }

    #[test]
    fn a_member_is_replaced_where_it_stands_and_every_copy_of_it() {
        let (out, found) = with(r#"{ "a":1e3, "k":0,"b":[1.50],"k":2 }"#, "k", "9", false).unwrap();
        assert_eq!(out, r#"{"a":1e3,"k":9,"b":[1.50],"k":9}"#);
        assert!(found);
    }

    #[test]
    fn absent_members_are_added_and_present_ones_left_as_written() {
        let m = [("resultType", r#""complete""#), ("ttlMs", "0")];
        assert_eq!(
            with_absent(r#"{ "a":1e3 ,"ttlMs":5 }"#, &m).unwrap(),
            r#"{ "a":1e3 ,"ttlMs":5 ,"resultType":"complete"}"#
        );
        assert_eq!(
            with_absent(" { } ", &m).unwrap(),
            r#" { "resultType":"complete","ttlMs":0}"#
        );
        let full = r#"{"resultType":"task","ttlMs":1}"#;
        assert_eq!(with_absent(full, &m).unwrap(), full);
        for bad in [r#"{"\u0061":1}"#, "[1]", r#"{"a":1"#] {
            assert!(with_absent(bad, &m).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_missing_member_is_added_last_only_when_asked() {
        assert_eq!(
            with(r#"{"a":1}"#, "k", "true", false).unwrap(),
            (r#"{"a":1}"#.to_string(), false)
        );
        assert_eq!(
            with(r#"{"a":1}"#, "k", "true", true).unwrap(),
            (r#"{"a":1,"k":true}"#.to_string(), false)
        );
        assert_eq!(with("{}", "k", "1", true).unwrap().0, r#"{"k":1}"#);
        for bad in [r#"{"\u006b":1}"#, "[1]", r#"{"a":1"#, r#"{"a":1} x"#] {
            assert!(with(bad, "k", "1", true).is_none(), "{bad}");
        }
    }
}
