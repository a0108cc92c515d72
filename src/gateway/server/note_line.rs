//! A server's notification for the agent as the server wrote it: the params' own text with
//! only what Palisade must rewrite put in (the agent's progress token for Palisade's, a log
//! message's `logger` with the server's name before it), framed as one line of the agent's
//! stream. Pure.
//!
//! Why: relayed through rmcp's typed models, a server's `"progress":1,"total":5` reached the
//! agent as `"progressToken":…,"progress":1.0,"total":5.0`: numbers re-spelled, keys
//! re-ordered, fields the model does not know dropped.
//!
//! Never: write a line that is not one JSON-RPC notification. The params are one JSON object
//! (serde read them when the envelope was classified, and `json_scan` walks them again);
//! anything it cannot walk (a key written with an escape) is left to the typed path.

use crate::gateway::json_scan::push_with_member;

/// The line `{"jsonrpc":"2.0","method":METHOD,"params":PARAMS}\n`, the method written as a
/// JSON string whatever it holds (a server names an extension's method itself).
pub fn line(method: &str, params: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(params.len() + method.len() + 40);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    // A `&str` always serializes.
    let method = serde_json::to_string(method).unwrap_or_else(|_| "\"\"".into());
    out.extend_from_slice(method.as_bytes());
    out.extend_from_slice(b",\"params\":");
    out.extend_from_slice(params.as_bytes());
    out.extend_from_slice(b"}\n");
    out
}

/// `params` (a JSON object's text) with member `key` set to `value` (JSON text): in its
/// place when present (every copy, were it repeated), else added last. Every other member is
/// written as it was. `None` when `params` is not an object `object_members` can walk.
pub fn with_member(params: &str, key: &str, value: &str) -> Option<String> {
    let mut out = String::with_capacity(params.len() + value.len() + key.len() + 4);
    push_with_member(&mut out, params, key, value, true)?;
    Some(out)
}

/// The `logger` a log message of `server`'s reaches the agent with: the server's name, then
/// the server's own logger if it named one (as rmcp's path wrote it).
pub fn logger_of(server: &str, own: Option<&str>) -> String {
    match own {
        Some(l) => format!("{server}/{l}"),
        None => server.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn the_token_is_the_agents_and_every_other_byte_the_servers() {
        let params = r#"{"progress":1,"total":5,"progressToken":17,"_meta":{"x":1e3}}"#;
        let out = with_member(params, "progressToken", r#""agent-tok""#).unwrap();
        assert_eq!(
            out,
            r#"{"progress":1,"total":5,"progressToken":"agent-tok","_meta":{"x":1e3}}"#
        );
        let l = line("notifications/progress", &out);
        let v: Value = serde_json::from_slice(&l).unwrap();
        assert_eq!(v["method"], "notifications/progress");
        assert_eq!(v["params"]["progressToken"], "agent-tok");
        assert!(l.ends_with(b"}\n") && !l[..l.len() - 1].contains(&b'\n'));
    }

    #[test]
    fn a_missing_member_is_added_last_and_an_unwalkable_object_is_refused() {
        assert_eq!(
            with_member(r#"{"level":"info","data":1.50}"#, "logger", r#""fs""#).unwrap(),
            r#"{"level":"info","data":1.50,"logger":"fs"}"#
        );
        assert_eq!(with_member("{}", "logger", "1").unwrap(), r#"{"logger":1}"#);
        for bad in [r#"{"lo\u0067ger":"x"}"#, "[1]", r#"{"a":1"#] {
            assert!(with_member(bad, "logger", "1").is_none(), "{bad}");
        }
    }

    #[test]
    fn a_method_is_written_as_json_whatever_it_holds() {
        let l = line("x\"},\"id\":1,\"y\":{\"\n", "{}");
        let v: Value = serde_json::from_slice(&l).unwrap();
        assert_eq!(v["method"], "x\"},\"id\":1,\"y\":{\"\n");
        assert!(v.get("id").is_none());
        assert!(!l[..l.len() - 1].contains(&b'\n'));
    }

    #[test]
    fn a_logger_is_prefixed_with_the_server() {
        assert_eq!(logger_of("fs", Some("io")), "fs/io");
        assert_eq!(logger_of("fs", None), "fs");
    }
}
