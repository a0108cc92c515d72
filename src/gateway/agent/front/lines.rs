//! The agent's answer lines: a result written around the bytes it came as (never copied
//! for a relayed result), an error, each with the request's id as the agent spelt it.

use rmcp::model::{ErrorCode, ErrorData};

use crate::gateway::line_out::OutLine;
use crate::gateway::raw_json::RawJson;

/// The agent's answer line up to its result: `{"jsonrpc":"2.0","id":ID,"result":`.
fn result_head(id: &str, extra: usize) -> Vec<u8> {
    let mut line = Vec::with_capacity(id.len() + 32 + extra);
    line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    line.extend_from_slice(id.as_bytes());
    line.extend_from_slice(b",\"result\":");
    line
}

const RESULT_TAIL: &[u8] = b"}\n";

/// The answer line for a result, as one buffer (the HTTP front's body).
pub(crate) fn result_line(id: &str, result: &RawJson) -> Vec<u8> {
    let body = result.get();
    let mut line = result_head(id, body.len() + RESULT_TAIL.len());
    line.extend_from_slice(body.as_bytes());
    line.extend_from_slice(RESULT_TAIL);
    line
}

/// The answer line for a result, its bytes left where they are (in the server's line, for
/// a relayed result): written around them, never copied.
pub(super) fn result_out(id: &str, result: RawJson) -> OutLine {
    let (body, span) = result.into_parts();
    OutLine::framed(result_head(id, 0), body, span, RESULT_TAIL)
}

pub(crate) fn error_line(id: &str, error: &ErrorData) -> Vec<u8> {
    let body = serde_json::to_string(error).unwrap_or_else(|_| {
        format!(
            "{{\"code\":{},\"message\":\"internal error\"}}",
            ErrorCode::INTERNAL_ERROR.0
        )
    });
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{body}}}\n").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn lines_keep_the_id_as_sent() {
        let raw = crate::gateway::call::answer::raw_json(&serde_json::json!({"x": 1}));
        let line = result_line("\"a-1\"", &raw);
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "{\"jsonrpc\":\"2.0\",\"id\":\"a-1\",\"result\":{\"x\":1}}\n"
        );
        let err = ErrorData::invalid_params("no", None);
        let v: Value = serde_json::from_slice(&error_line("7", &err)).unwrap();
        assert_eq!(v["id"], 7);
        assert_eq!(v["error"]["code"], -32602);
    }
}
