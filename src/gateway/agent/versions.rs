//! Protocol versions on the two sides, and the bridge between them.
//!
//! Upstream, the agent speaks 2025-11-25 or older through `initialize`, or 2026-07-28 with no
//! handshake (each request carries its version, client info and capabilities in `_meta`).
//! Downstream, each server is spoken to in its own era (`server::era`): that side is not
//! this module's.
//!
//! The bridge, for a 2026-07-28 request: the request envelope's `_meta` keys stay with the
//! gateway (a server would read them as its own; a 2026-07-28 server gets Palisade's), and the
//! server's result gets what 2026-07-28 requires of every result: `resultType: "complete"`, and on
//! cacheable results (lists, `resources/read`) the most conservative cache hints (`ttlMs: 0`,
//! `cacheScope: "private"`; the gateway's lists change whenever a server's do). Hints a
//! result already has are kept.
//!
//! Pure: no I/O.

use rmcp::model::{ErrorData, ProtocolVersion, RequestMetaObject};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The handshake version Palisade offers a server in `initialize`.
pub const DOWNSTREAM: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// The `_meta` keys of a 2026-07-28 request envelope: the agent's, never forwarded.
pub const ENVELOPE_KEYS: [&str; 4] = [
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientInfo",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/logLevel",
];

/// Results a 2026-07-28 client may cache, and so must carry cache hints.
const CACHEABLE: [&str; 5] = [
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// Whether a request declares 2026-07-28 (or later) in its own `_meta`.
pub fn is_modern(meta: &RequestMetaObject) -> bool {
    meta.protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// Whether rmcp's HTTP transport serves a request (other than `initialize`, always in its
/// session) outside any session, whatever `Mcp-Session-Id` it names. rmcp 3.9's rule
/// (`is_legacy_request`, negated): the request's `_meta` carries a protocol version and the
/// client's capabilities, each as rmcp reads them (of any version: the per-request
/// envelope), or the version it speaks, its `_meta`'s else its `MCP-Protocol-Version`
/// header's, has no `initialize` (2026-07-28 and later). A request whose `_meta` has
/// capabilities but no version is served in its session. This is the rule of the transport
/// as `http::principals::transport_config` sets it up (sessions kept, no session store).
pub fn served_sessionless(meta: &RequestMetaObject, header: Option<&str>) -> bool {
    let version = meta.protocol_version();
    let envelope = version.is_some() && meta.client_capabilities().is_some();
    let speaks = version.as_ref().map(ProtocolVersion::as_str).or(header);
    envelope || speaks.is_some_and(|v| v >= ProtocolVersion::V_2026_07_28.as_str())
}

/// Whether a request's `_meta` has any key of the per-request envelope
/// (`io.modelcontextprotocol/...`). rmcp reads these keys, checks them against the
/// `MCP-Protocol-Version` header and may then serve the request outside its session
/// (`served_sessionless`), so a session request carrying one is left to rmcp's path.
pub fn carries_envelope(meta: &RequestMetaObject) -> bool {
    meta.keys()
        .any(|k| k.starts_with("io.modelcontextprotocol/"))
}

/// A 2026-07-28 request must carry its whole envelope; the error names what is missing.
/// (rmcp checks this for the requests it answers; Palisade checks the ones it relays.)
pub fn check_envelope(meta: &RequestMetaObject) -> Result<(), ErrorData> {
    if !is_modern(meta) {
        return Ok(());
    }
    let missing = meta.missing_required_keys(&ProtocolVersion::V_2026_07_28);
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ErrorData::invalid_params(
            format!(
                "request _meta is missing or has malformed required fields: {}",
                missing.join(", ")
            ),
            None,
        ))
    }
}

/// Removes the agent's envelope keys from `_meta` bound for a server.
pub fn strip_envelope(meta: &mut Map<String, Value>) {
    for key in ENVELOPE_KEYS {
        meta.remove(key);
    }
}

/// Gives a result the `resultType: "complete"` discriminator unless it has one.
pub fn mark_complete(obj: &mut Map<String, Value>) {
    obj.entry("resultType")
        .or_insert_with(|| Value::String("complete".into()));
}

/// Adds what a 2026-07-28 result of `method` must carry, keeping what it has.
pub fn stamp_result(method: &str, result: &mut Value) {
    let Value::Object(obj) = result else {
        return;
    };
    // A task handle's discriminator is the server's to give: it is left alone.
    if !obj.contains_key("task") {
        mark_complete(obj);
    }
    if CACHEABLE.contains(&method) {
        obj.entry("ttlMs").or_insert_with(|| Value::from(0));
        obj.entry("cacheScope")
            .or_insert_with(|| Value::String("private".into()));
    }
}

/// `stamp_result` on a result's JSON text: the server's bytes kept, what a 2026-07-28 result
/// of `method` must carry added at the end where it lacks it.
pub fn stamp_raw(method: &str, result: Box<RawValue>) -> Box<RawValue> {
    let mut members = vec![("resultType", r#""complete""#)];
    if CACHEABLE.contains(&method) {
        members.extend([("ttlMs", "0"), ("cacheScope", r#""private""#)]);
    }
    // A task handle's discriminator is the server's to give: such a result is left to the
    // decoded path, as is one the scan cannot walk.
    let text = result.get();
    let is_task = || {
        let mut task = false;
        let _ = crate::gateway::json_scan::object_members(text.as_bytes(), |k, _| {
            task |= k == b"task";
            Some(())
        });
        task
    };
    if !is_task() {
        let stamped = crate::gateway::json_scan::with_absent(text, &members)
            .and_then(|t| RawValue::from_string(t).ok());
        if let Some(stamped) = stamped {
            return stamped;
        }
    }
    let Ok(mut v) = serde_json::from_str::<Value>(text) else {
        return result;
    };
    stamp_result(method, &mut v);
    serde_json::value::to_raw_value(&v).unwrap_or(result)
}

/// The version a request was made in, for the audit record: its own `_meta`'s, else the
/// session's.
pub fn agent_version(ctx: &rmcp::service::RequestContext<rmcp::RoleServer>) -> Option<String> {
    ctx.protocol_version().map(|v| v.as_str().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stamped_text_means_what_the_stamped_value_does_and_keeps_its_bytes() {
        for (method, text) in [
            (
                "resources/read",
                r#"{"contents":[{"uri":"x","text":"1e3"}],"n":1.50}"#,
            ),
            ("prompts/get", r#"{"messages":[],"resultType":"complete"}"#),
            ("resources/read", r#"{"ttlMs":60000,"contents":[]}"#),
            ("completion/complete", "{}"),
            ("tools/call", r#"{"task":{"taskId":"t"}}"#),
            ("prompts/get", r#"{"a":1,"a":2}"#),
        ] {
            let raw = RawValue::from_string(text.into()).unwrap();
            let stamped = stamp_raw(method, raw);
            let mut want: Value = serde_json::from_str(text).unwrap();
            stamp_result(method, &mut want);
            let got: Value = serde_json::from_str(stamped.get()).unwrap();
            assert_eq!(got, want, "{method} {text}");
        }
        let raw = RawValue::from_string(r#"{"n":1.50}"#.into()).unwrap();
        assert_eq!(
            stamp_raw("resources/read", raw).get(),
            r#"{"n":1.50,"resultType":"complete","ttlMs":0,"cacheScope":"private"}"#
        );
    }

    fn meta(v: Value) -> RequestMetaObject {
        serde_json::from_value(v).unwrap()
    }

    fn modern() -> Value {
        json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "c", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
            "progressToken": 3
        })
    }

    #[test]
    fn a_modern_request_is_known_by_its_own_meta() {
        assert!(is_modern(&meta(modern())));
        assert!(!is_modern(&meta(json!({"progressToken": 1}))));
        assert!(!is_modern(&meta(
            json!({"io.modelcontextprotocol/protocolVersion": "2025-11-25"})
        )));
    }

    /// rmcp's rule, case by case, and the fast path's rule never keeping in a session a
    /// request rmcp serves outside one: with no header or one before 2026-07-28 (a session
    /// request's), `served_sessionless` implies `carries_envelope`.
    #[test]
    fn a_request_is_sessionless_where_rmcp_serves_it_so() {
        let caps = json!({"elicitation": {}});
        let cases = [
            (json!({}), None, false),
            (json!({}), Some("2025-11-25"), false),
            (json!({"progressToken": 1}), Some("2026-07-28"), true),
            (modern(), Some("2026-07-28"), true),
            // The envelope of an older version: still outside the session.
            (
                json!({"io.modelcontextprotocol/protocolVersion": "2025-11-25",
                       "io.modelcontextprotocol/clientCapabilities": caps}),
                Some("2025-11-25"),
                true,
            ),
            // Capabilities without a version, or a version without capabilities: in it.
            (
                json!({"io.modelcontextprotocol/clientCapabilities": caps}),
                Some("2025-11-25"),
                false,
            ),
            (
                json!({"io.modelcontextprotocol/clientCapabilities": caps}),
                None,
                false,
            ),
            (
                json!({"io.modelcontextprotocol/protocolVersion": "2025-11-25"}),
                Some("2025-11-25"),
                false,
            ),
            // Capabilities rmcp cannot read are none.
            (
                json!({"io.modelcontextprotocol/protocolVersion": "2025-11-25",
                       "io.modelcontextprotocol/clientCapabilities": "all"}),
                Some("2025-11-25"),
                false,
            ),
            // The `_meta` version first, then the header's.
            (
                json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"}),
                Some("2025-11-25"),
                true,
            ),
            // A bare `protocolVersion` is an ordinary `_meta` key.
            (json!({"protocolVersion": "2026-07-28"}), None, false),
        ];
        for (m, header, want) in cases {
            let m = meta(m);
            assert_eq!(served_sessionless(&m, header), want, "{m:?} {header:?}");
            let a_session_requests = header.is_none_or(|h| h < "2026-07-28");
            if want && a_session_requests {
                assert!(carries_envelope(&m), "{m:?}");
            }
        }
        assert!(!carries_envelope(&meta(json!({"protocolVersion": "x"}))));
    }

    #[test]
    fn an_incomplete_envelope_is_refused_and_a_legacy_request_needs_none() {
        assert!(check_envelope(&meta(modern())).is_ok());
        let e = check_envelope(&meta(
            json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"}),
        ))
        .unwrap_err();
        assert!(e.message.contains("clientCapabilities"), "{}", e.message);
        assert!(check_envelope(&meta(json!({}))).is_ok());
    }

    #[test]
    fn the_envelope_stays_with_the_gateway() {
        let Value::Object(mut m) = modern() else {
            unreachable!()
        };
        strip_envelope(&mut m);
        assert_eq!(Value::Object(m), json!({"progressToken": 3}));
    }

    #[test]
    fn results_get_what_2026_requires_and_keep_what_they_have() {
        let mut list = json!({"tools": [], "ttlMs": 5000});
        stamp_result("tools/list", &mut list);
        assert_eq!(
            list,
            json!({"tools": [], "ttlMs": 5000, "resultType": "complete", "cacheScope": "private"})
        );
        let mut call = json!({"content": [], "resultType": "input_required"});
        stamp_result("tools/call", &mut call);
        assert_eq!(call, json!({"content": [], "resultType": "input_required"}));
        let mut task = json!({"task": {"taskId": "t"}});
        stamp_result("tools/call", &mut task);
        assert_eq!(task, json!({"task": {"taskId": "t"}}));
    }
}
