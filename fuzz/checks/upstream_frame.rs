//! The cut of the client's stdin into JSON-RPC lines (src/gateway/upstream_frame.rs:
//! `LineCap`, the length cap between `palisade serve`'s stdin and rmcp).
//!
//! Input: one byte choosing the line limit (1..=224 bytes, or 4080..=4111, around the 4096
//! bytes of a line kept to read its id), then the pipe's read sizes and rmcp's read sizes
//! (each a count byte, then one byte per size: `b + 1` bytes, 255 for a whole buffer), then
//! the stream.
//!
//! Invariants:
//! 1. However the pipe splits the stream and however much rmcp asks for per read, rmcp
//!    reads exactly the bytes it reads when the stream comes in one piece and is read in one
//!    go; no read returns nothing (EOF to rmcp) before the end.
//! 2. A line within the limit (newline included, rmcp's rule) passes byte for byte, over-long
//!    lines before it or not (a line's fate depends on that line only): a stream without an
//!    over-long line passes unchanged.
//! 3. Of an over-long line exactly the first `limit` bytes pass and nothing more of it;
//!    then, if the line was ended, a newline (rmcp discards what it holds at it) and at most
//!    one stand-in request, one line: `{"jsonrpc":"2.0","id":ID,"method":"palisade/oversized",
//!    "params":{"bytes":B,"limit":L}}` with B the line's length and L the limit.
//! 4. Never an invented id: ID is a string or a number written in the line's first bytes (the
//!    part kept: up to the limit and 4096 bytes), which name `"id"` and `"method"`; when the
//!    whole line is a JSON object (without a repeated key), it has a `method` and its `id`
//!    is ID (a response's id is not a request's).
//! 5. The id is found when the line starts as the SDKs write requests,
//!    `{"jsonrpc":"2.0","id":7,"method":"tools/call",...` (a plain integer or string id,
//!    a plain method), within the part kept: the client's call is always answered. (Not
//!    asked when `"id"` appears twice there: which of two ids is meant is anyone's guess, and
//!    rmcp refuses a repeated field.)

use std::fmt;

use palisade::fuzzing::{self, OVERSIZED_METHOD, UPSTREAM_HEAD as HEAD};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::Input;

/// rmcp's reads when the stream is read in one go.
const WHOLE: usize = 1 << 16;

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let b = input.byte();
    let max = if b < 224 {
        usize::from(b) + 1
    } else {
        HEAD - 16 + usize::from(b - 224)
    };
    let reads = sizes(&mut input);
    let outs = sizes(&mut input);
    let stream = input.rest();

    let whole = fuzzing::cap_lines(stream, &[usize::MAX], &[WHOLE], max);
    let split = fuzzing::cap_lines(stream, &reads, &outs, max);
    assert!(
        split == whole,
        "the output depends on the read sizes (limit {max}, pipe {reads:?}, rmcp {outs:?}):\n\
         split: {}\nwhole: {}",
        show(&split),
        show(&whole)
    );

    let mut expected = Vec::with_capacity(stream.len());
    for line in stream.split_inclusive(|b| *b == b'\n') {
        if line.len() <= max {
            expected.extend_from_slice(line);
        } else if !line.ends_with(b"\n") {
            // The stream ends inside an over-long line: its first `max` bytes, nothing more.
            expected.extend_from_slice(&line[..max]);
        } else {
            let alone = fuzzing::cap_lines(line, &[usize::MAX], &[WHOLE], max);
            over_long(line, &alone, max);
            expected.extend_from_slice(&alone);
        }
    }
    assert!(
        whole == expected,
        "limit {max}: the stream is not passed line by line:\ngot:      {}\nexpected: {}",
        show(&whole),
        show(&expected)
    );
}

/// A list of 1 to 8 read sizes.
fn sizes(input: &mut Input) -> Vec<usize> {
    let n = input.below(8) + 1;
    (0..n)
        .map(|_| match input.byte() {
            255 => WHOLE,
            b => usize::from(b) + 1,
        })
        .collect()
}

/// What rmcp reads of one over-long `line` (ended by its newline) fed alone: invariants 3-5.
fn over_long(line: &[u8], out: &[u8], max: usize) {
    let text = show(line);
    assert!(
        out.len() > max && out[..max] == line[..max] && out[max] == b'\n',
        "limit {max}: not the first {max} bytes and a newline: {} for {text}",
        show(out)
    );
    let head = &line[..max.min(HEAD)];
    let sdk = sdk_id(head).filter(|_| head.windows(4).filter(|w| w == b"\"id\"").count() == 1);
    let stand_in = &out[max + 1..];
    let Some(id) = stand_in_id(stand_in, line.len(), max) else {
        if let Some(want) = sdk {
            panic!("limit {max}: no stand-in for the request {want} in {text}");
        }
        return;
    };
    assert!(
        contains(head, b"\"id\"") && contains(head, b"\"method\"") && written_in(head, &id),
        "limit {max}: the id {id} of the stand-in is not in the first bytes of {text}"
    );
    if let Ok(Pairs(pairs)) = serde_json::from_slice::<Pairs>(&line[..line.len() - 1]) {
        let unique = pairs
            .iter()
            .enumerate()
            .all(|(i, (k, _))| pairs[..i].iter().all(|(k2, _)| k2 != k));
        if unique {
            let field = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v);
            assert!(
                field("method").is_some(),
                "a stand-in with id {id} for a line that is no request: {text}"
            );
            assert!(
                field("id").is_some_and(|v| same(v, &id)),
                "the stand-in's id {id} is not the request's: {text}"
            );
        }
    }
    if let Some(want) = sdk {
        assert!(
            same(&want, &id),
            "stand-in id {id}, the request's is {want}: {text}"
        );
    }
}

/// The id of the stand-in request `bytes` (none when empty), checking its shape.
fn stand_in_id(bytes: &[u8], len: usize, max: usize) -> Option<Value> {
    if bytes.is_empty() {
        return None;
    }
    assert!(
        bytes.ends_with(b"\n") && bytes.iter().filter(|b| **b == b'\n').count() == 1,
        "the stand-in is not one line: {}",
        show(bytes)
    );
    let v: Value = serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("the stand-in is not JSON ({e}): {}", show(bytes)));
    let obj = v.as_object().expect("the stand-in is an object");
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["id", "jsonrpc", "method", "params"], "{v}");
    assert_eq!(obj["jsonrpc"], "2.0", "{v}");
    assert_eq!(obj["method"], OVERSIZED_METHOD, "{v}");
    assert_eq!(
        obj["params"],
        serde_json::json!({"bytes": len, "limit": max}),
        "{v}"
    );
    let id = obj["id"].clone();
    assert!(id.is_string() || id.is_number(), "{v}");
    Some(id)
}

/// Whether the id's value is written in `head`: a string as itself (the scanner reads none
/// with escapes), a number as some numeric token there.
fn written_in(head: &[u8], id: &Value) -> bool {
    match id {
        Value::String(_) => contains(head, id.to_string().as_bytes()),
        Value::Number(_) => (0..head.len())
            .filter(|&i| matches!(head[i], b'-' | b'0'..=b'9'))
            .any(|i| {
                let n = head[i..]
                    .iter()
                    .take_while(|b| matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .count();
                serde_json::from_slice::<Value>(&head[i..i + n]).is_ok_and(|v| same(&v, id))
            }),
        _ => false,
    }
}

/// The id of a request written the way the SDKs write one, when `head` holds its start:
/// `{"jsonrpc":"2.0","id":` + an integer (up to 15 digits) or a string of `[A-Za-z0-9_-]`,
/// `,"method":"` + `[A-Za-z0-9_/-]*` + `"`.
fn sdk_id(head: &[u8]) -> Option<Value> {
    let rest = head.strip_prefix(br#"{"jsonrpc":"2.0","id":"#)?;
    let id_len = if rest.first() == Some(&b'"') {
        let n = rest[1..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || b"_-".contains(b))
            .count();
        (rest.get(n + 1) == Some(&b'"')).then_some(n + 2)?
    } else {
        let n = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        (1..=15).contains(&n).then_some(n)?
    };
    let (id, rest) = rest.split_at(id_len);
    let rest = rest.strip_prefix(br#","method":""#)?;
    let n = rest
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || b"_/-".contains(b))
        .count();
    if rest.get(n) != Some(&b'"') {
        return None;
    }
    serde_json::from_slice(id).ok()
}

/// Equal ids; numbers compare as f64 within rounding (serde_json's default float parsing
/// may differ from exact by an ulp, so a float id's text need not round-trip exactly).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_f64() || b.is_f64() => {
            x == y || (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(y.abs())
        }
        _ => a == b,
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn show(bytes: &[u8]) -> String {
    const SHOWN: usize = 600;
    let s = String::from_utf8_lossy(&bytes[..bytes.len().min(SHOWN)]);
    if bytes.len() > SHOWN {
        format!("{s:?}... ({} bytes)", bytes.len())
    } else {
        format!("{s:?}")
    }
}

/// A JSON object's members in order, repeated keys included.
struct Pairs(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Pairs;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pairs, A::Error> {
                let mut pairs = Vec::new();
                while let Some(pair) = map.next_entry::<String, Value>()? {
                    pairs.push(pair);
                }
                Ok(Pairs(pairs))
            }
        }
        d.deserialize_map(Members)
    }
}
