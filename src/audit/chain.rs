//! The hash chain: how a record becomes a line, and how a line is checked.
//!
//! A line is the record's JSON with `seq` and `prevHash` added, then `"hash"` appended as
//! the last key: `hash = sha256(line without the hash key)`. Since the body contains the
//! previous record's hash, editing a record breaks its own hash, removing one breaks the
//! next record's `prevHash` and `seq`, and reordering breaks both. The hash covers the exact
//! bytes written, so verification never re-serialises (no canonical-JSON ambiguity).
//!
//! Pure. Limits: a chain cannot show that records were cut off the end; keep the last hash
//! elsewhere (it is printed by `palisade audit verify`) to detect that.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// `prevHash` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

const HASH_KEY: &str = ",\"hash\":\"";

/// Where a chain stands: the last record's sequence number and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainState {
    pub seq: u64,
    pub hash: String,
}

impl ChainState {
    pub fn genesis() -> ChainState {
        ChainState {
            seq: 0,
            hash: GENESIS.to_string(),
        }
    }
}

/// Builds the line (without newline) for a record body that follows `prev`, and the new
/// chain state. `body` must be a JSON object.
pub fn seal(mut body: serde_json::Map<String, Value>, prev: &ChainState) -> (String, ChainState) {
    let seq = prev.seq + 1;
    body.remove("hash");
    body.insert("seq".into(), Value::from(seq));
    body.insert("prevHash".into(), Value::from(prev.hash.clone()));
    let text = Value::Object(body).to_string();
    let hash = hex::encode(Sha256::digest(text.as_bytes()));
    // `text` ends with the object's closing brace; the hash goes in as the last key.
    let line = format!("{}{HASH_KEY}{hash}\"}}", &text[..text.len() - 1]);
    (line, ChainState { seq, hash })
}

/// What is wrong with a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    #[error("not a sealed audit record (no trailing hash)")]
    Malformed,
    #[error("record was edited: its hash does not match its content")]
    Edited,
    #[error("not valid JSON: {0}")]
    Json(String),
    #[error("missing or invalid {0}")]
    Field(&'static str),
}

/// Checks one line's own hash and returns its (seq, prevHash, hash).
pub fn open_line(line: &str) -> Result<(u64, String, ChainState), LineError> {
    let pos = line.rfind(HASH_KEY).ok_or(LineError::Malformed)?;
    let hash = &line[pos + HASH_KEY.len()..];
    let hash = hash.strip_suffix("\"}").ok_or(LineError::Malformed)?;
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(LineError::Malformed);
    }
    let body = format!("{}}}", &line[..pos]);
    let parsed: Value = serde_json::from_str(line).map_err(|e| LineError::Json(e.to_string()))?;
    if hex::encode(Sha256::digest(body.as_bytes())) != hash {
        return Err(LineError::Edited);
    }
    let seq = parsed
        .get("seq")
        .and_then(Value::as_u64)
        .ok_or(LineError::Field("seq"))?;
    let prev = parsed
        .get("prevHash")
        .and_then(Value::as_str)
        .ok_or(LineError::Field("prevHash"))?
        .to_string();
    Ok((
        seq,
        prev,
        ChainState {
            seq,
            hash: hash.to_string(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn sealed_lines_open_and_chain() {
        let (l1, s1) = seal(body(json!({"a":1})), &ChainState::genesis());
        let (l2, s2) = seal(body(json!({"a":2,"x":{"hash":"inner"}})), &s1);
        let (seq1, prev1, st1) = open_line(&l1).unwrap();
        assert_eq!((seq1, prev1.as_str()), (1, GENESIS));
        assert_eq!(st1, s1);
        let (seq2, prev2, st2) = open_line(&l2).unwrap();
        assert_eq!(seq2, 2);
        assert_eq!(prev2, s1.hash);
        assert_eq!(st2, s2);
    }

    #[test]
    fn any_edit_is_detected() {
        let (l, _) = seal(body(json!({"tool":"read_file"})), &ChainState::genesis());
        let edited = l.replace("read_file", "read_fil3");
        assert_eq!(open_line(&edited).unwrap_err(), LineError::Edited);
        assert_eq!(open_line("{\"a\":1}").unwrap_err(), LineError::Malformed);
    }
}
