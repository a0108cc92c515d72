//! A JSON value as text, owned: what a server sent (a slice of the very line that was read
//! from its stdout) or what Palisade built. The relay's currency for results, from the
//! peer's dispatch to the line written to the agent.
//!
//! Why not `Box<RawValue>`: making one from a slice of a received line copies the slice
//! (and from a `String`, serde parses it again to check it). A 1 MiB result was copied three
//! times between the server's pipe and the agent's (the tap's buffer into a line, the line's
//! result into a `RawValue`, that into the answer line); here the line's buffer itself moves
//! from the tap to the writer, which frames the result with the agent's id around it.
//!
//! Never: hold text that is not one valid JSON value. The constructors are the proof: a
//! `RawValue` (serde checked it), a serialized `Value`, or a span the envelope scanner or
//! serde checked (`received`, for the peer only).

use std::ops::Range;

use serde_json::value::RawValue;
use serde_json::Value;

use crate::gateway::call::probe::ResultProbe;

/// One JSON value's text, possibly a slice of a larger owned buffer.
#[derive(Clone)]
pub struct RawJson {
    text: String,
    span: Range<usize>,
    /// What the value, a result object, says of itself, when the envelope scanner read it
    /// on its way (`server::envelope`); never set on text Palisade built.
    said: Option<ResultProbe>,
}

impl RawJson {
    /// The value's JSON text.
    pub fn get(&self) -> &str {
        // The constructors keep the span inside the text on character boundaries; `null`
        // only keeps this total (no panic in the gateway).
        self.text.get(self.span.clone()).unwrap_or("null")
    }

    /// A span of a received line that has been checked to be one JSON value (by
    /// `server::envelope` or serde); the line is kept, not copied. `said`: what the
    /// envelope scanner read of that value, a result object, on its way (`None` if not).
    pub(crate) fn received(line: String, span: Range<usize>, said: Option<ResultProbe>) -> RawJson {
        debug_assert!(line.get(span.clone()).is_some());
        RawJson {
            text: line,
            span,
            said,
        }
    }

    /// What the envelope scanner read of this result object's `isError` and `task`.
    pub(crate) fn said(&self) -> Option<ResultProbe> {
        self.said
    }

    /// The text of a value Palisade built.
    pub fn from_value(value: &Value) -> RawJson {
        // A `Value` always serializes; `null` only keeps the type total.
        let text = serde_json::to_string(value).unwrap_or_else(|_| "null".into());
        RawJson::whole(text)
    }

    fn whole(text: String) -> RawJson {
        let span = 0..text.len();
        RawJson {
            text,
            span,
            said: None,
        }
    }

    /// As serde's type, for the paths that keep one (a copy when this is a slice of a line,
    /// and serde checks the text again).
    pub fn into_raw_value(self) -> Box<RawValue> {
        let text = if self.span == (0..self.text.len()) {
            self.text
        } else {
            self.get().to_string()
        };
        // The text is one valid JSON value (the constructors' contract); `null` only keeps
        // the type total.
        RawValue::from_string(text).unwrap_or_else(|_| RawJson::null_value())
    }

    fn null_value() -> Box<RawValue> {
        serde_json::value::to_raw_value(&Value::Null).unwrap_or_default()
    }

    /// The buffer and the value's span in it, for a writer that sends the span as it is.
    pub(crate) fn into_parts(self) -> (Vec<u8>, Range<usize>) {
        (self.text.into_bytes(), self.span)
    }
}

impl From<Box<RawValue>> for RawJson {
    fn from(raw: Box<RawValue>) -> RawJson {
        RawJson::whole(Box::<str>::from(raw).into_string())
    }
}

impl std::fmt::Debug for RawJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.get();
        match text.char_indices().nth(200) {
            Some((cut, _)) => write!(f, "RawJson({}… {} bytes)", &text[..cut], text.len()),
            None => write!(f, "RawJson({text})"),
        }
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &RawJson) -> bool {
        self.get() == other.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_of_a_line_is_the_value_and_converts_whole() {
        let line = r#"{"jsonrpc":"2.0","id":1,"result":{"a":1.0}}"#.to_string();
        let start = line.find("{\"a\"").unwrap();
        let raw = RawJson::received(line.clone(), start..line.len() - 1, None);
        assert_eq!(raw.get(), r#"{"a":1.0}"#);
        assert_eq!(raw.clone().into_raw_value().get(), r#"{"a":1.0}"#);
        let (buf, span) = raw.into_parts();
        assert_eq!(&buf[span], br#"{"a":1.0}"#);
        let built = RawJson::from_value(&serde_json::json!({"k": [1, "x"]}));
        assert_eq!(built.get(), r#"{"k":[1,"x"]}"#);
        let from_serde: RawJson = RawValue::from_string("[true]".into()).unwrap().into();
        assert_eq!(from_serde.get(), "[true]");
    }
}
