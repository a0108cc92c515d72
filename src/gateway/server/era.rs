//! Which protocol era Palisade speaks to one server, and the 2026-07-28 side of it.
//!
//! A server is spoken to in the newest version it supports (config `protocol`, default
//! `auto`): Palisade first asks `server/discover` in 2026-07-28; a server that answers it
//! with 2026-07-28 among its versions is *sessionless* from then on, any other answer (an
//! error, an unreadable result, only older versions) falls back to the `initialize` handshake
//! on the same connection, as MCP's own clients do.
//!
//! On a sessionless connection every request carries Palisade's envelope in `_meta` (its
//! version, client info and the capabilities it offers this server), and the server asks for
//! what it needs (roots, sampling, elicitation) inside the request's result: `resultType:
//! "input_required"` with `inputRequests`. Palisade answers them exactly as it answers the same
//! requests sent standalone by a 2025-11-25 server (roots from the server's own root set,
//! sampling and elicitation through the relay) and retries with `inputResponses` and the
//! echoed `requestState`. So roots keep reaching a 2026-07-28 server, per request.
//!
//! Pure: no I/O. The wire is `request.rs` (requests) and `supervisor/start.rs` (the probe).

use serde::Deserialize;
use serde_json::{Map, Value};

/// The 2026-07-28 revision, as it appears on the wire.
pub const SESSIONLESS_VERSION: &str = "2026-07-28";

/// Rounds of input one request may ask for before Palisade gives up on it (a server that
/// keeps asking would otherwise hold the call forever).
pub const MAX_INPUT_ROUNDS: usize = 8;

/// The era of one live connection.
#[derive(Debug, Clone, PartialEq)]
pub enum Era {
    /// `initialize` was answered: 2025-11-25 or older, with a session.
    Handshake,
    /// `server/discover` was answered with 2026-07-28: each request carries `envelope` in its
    /// `_meta`.
    Sessionless { envelope: Map<String, Value> },
}

impl Era {
    pub fn is_sessionless(&self) -> bool {
        matches!(self, Era::Sessionless { .. })
    }

    /// Adds the envelope to a request's params (a sessionless connection only). Palisade's
    /// keys win over any the params carry: the agent's envelope never reaches a server.
    pub fn stamp(&self, params: &mut Map<String, Value>) {
        let Era::Sessionless { envelope } = self else {
            return;
        };
        let entry = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        if let Value::Object(meta) = entry {
            for (k, v) in envelope {
                meta.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The `_meta` envelope of Palisade's 2026-07-28 requests: `capabilities` are what it offers
/// this server (the same object `initialize` would carry).
pub fn envelope(capabilities: &Value, client_info: &Value) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "io.modelcontextprotocol/protocolVersion".into(),
        Value::String(SESSIONLESS_VERSION.into()),
    );
    m.insert(
        "io.modelcontextprotocol/clientCapabilities".into(),
        capabilities.clone(),
    );
    m.insert(
        "io.modelcontextprotocol/clientInfo".into(),
        client_info.clone(),
    );
    m
}

/// What a `server/discover` answer says of the server.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// It speaks 2026-07-28: its capabilities, `serverInfo` (from the result's `_meta`, when
    /// given) and instructions, as a typed view would read an `initialize` result.
    Sessionless(Value),
    /// Anything else: fall back to `initialize`. The reason is logged.
    Handshake(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Discover {
    #[serde(default)]
    supported_versions: Vec<String>,
    #[serde(default)]
    capabilities: Option<Value>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default, rename = "_meta")]
    meta: Option<Map<String, Value>>,
}

/// Reads a `server/discover` result (`None`: the server answered with an error, whose text is
/// `error`). `fallback_name` names a server whose answer carries no `serverInfo`.
pub fn verdict(result: Result<&str, &str>, fallback_name: &str) -> Verdict {
    let text = match result {
        Ok(text) => text,
        Err(e) => return Verdict::Handshake(format!("server/discover refused: {e}")),
    };
    let d: Discover = match serde_json::from_str(text) {
        Ok(d) => d,
        Err(e) => return Verdict::Handshake(format!("server/discover answer unreadable: {e}")),
    };
    if !d
        .supported_versions
        .iter()
        .any(|v| v == SESSIONLESS_VERSION)
    {
        return Verdict::Handshake(format!(
            "server/discover names only {:?}",
            d.supported_versions
        ));
    }
    let info = d
        .meta
        .as_ref()
        .and_then(|m| m.get("io.modelcontextprotocol/serverInfo"))
        .filter(|i| i.get("name").is_some_and(Value::is_string))
        .cloned()
        .unwrap_or_else(|| serde_json::json!({"name": fallback_name, "version": ""}));
    let mut view = Map::new();
    view.insert(
        "protocolVersion".into(),
        Value::String(SESSIONLESS_VERSION.into()),
    );
    view.insert(
        "capabilities".into(),
        d.capabilities.unwrap_or_else(|| Value::Object(Map::new())),
    );
    view.insert("serverInfo".into(), info);
    if let Some(i) = d.instructions {
        view.insert("instructions".into(), Value::String(i));
    }
    Verdict::Sessionless(Value::Object(view))
}

/// An `input_required` result: what the server needs before it can answer.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputRequired {
    #[serde(default)]
    pub input_requests: Map<String, Value>,
    #[serde(default)]
    pub request_state: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Discriminator {
    #[serde(default)]
    result_type: Option<String>,
}

/// The `input_required` result a sessionless server answered with, if it is one. Cheap for
/// every other result: the bytes are searched for the tag before anything is parsed.
pub fn input_required(text: &str) -> Option<InputRequired> {
    if !text.contains("\"input_required\"") {
        return None;
    }
    let d: Discriminator = serde_json::from_str(text).ok()?;
    if d.result_type.as_deref() != Some("input_required") {
        return None;
    }
    serde_json::from_str(text).ok()
}

/// The params of the retry: the original request's, with the answers and the echoed state
/// (and nothing of an earlier round's answers).
pub fn retry_params(
    original: &Map<String, Value>,
    responses: Map<String, Value>,
    state: Option<Value>,
) -> Map<String, Value> {
    let mut p = original.clone();
    p.insert("inputResponses".into(), Value::Object(responses));
    match state {
        Some(s) => {
            p.insert("requestState".into(), s);
        }
        None => {
            p.remove("requestState");
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use serde_json::value::RawValue;

    fn raw(v: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&v).unwrap()
    }

    #[test]
    fn a_server_naming_2026_07_28_is_spoken_to_sessionless_with_its_own_info() {
        let answer = raw(json!({
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {"listChanged": false}},
            "resultType": "complete",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "git", "version": "1"}}
        }));
        let Verdict::Sessionless(view) = verdict(Ok(answer.get()), "fallback") else {
            panic!()
        };
        assert_eq!(view["protocolVersion"], "2026-07-28");
        assert_eq!(view["serverInfo"]["name"], "git");
        assert_eq!(view["capabilities"]["tools"]["listChanged"], false);
        // The typed view rmcp reads an initialize result with accepts it.
        let typed: rmcp::model::InitializeResult = serde_json::from_value(view).unwrap();
        assert_eq!(typed.server_info.name, "git");
    }

    #[test]
    fn errors_older_versions_and_junk_fall_back_to_the_handshake() {
        assert!(matches!(
            verdict(Err("Method not found"), "s"),
            Verdict::Handshake(_)
        ));
        let old = raw(json!({"supportedVersions": ["2025-11-25"], "capabilities": {}}));
        assert!(matches!(verdict(Ok(old.get()), "s"), Verdict::Handshake(_)));
        let junk = raw(json!({"supportedVersions": "2026-07-28"}));
        assert!(matches!(
            verdict(Ok(junk.get()), "s"),
            Verdict::Handshake(_)
        ));
        let unnamed = raw(json!({"supportedVersions": ["2026-07-28"]}));
        let Verdict::Sessionless(view) = verdict(Ok(unnamed.get()), "s") else {
            panic!()
        };
        assert_eq!(view["serverInfo"]["name"], "s");
    }

    #[test]
    fn the_envelope_is_palisades_own_and_replaces_any_other() {
        let era = Era::Sessionless {
            envelope: envelope(&json!({"roots": {}}), &json!({"name": "palisade"})),
        };
        let mut p = json!({"name": "t", "_meta": {
            "progressToken": 4,
            "io.modelcontextprotocol/clientInfo": {"name": "agent"}
        }})
        .as_object()
        .unwrap()
        .clone();
        era.stamp(&mut p);
        assert_eq!(p["_meta"]["progressToken"], 4);
        assert_eq!(
            p["_meta"]["io.modelcontextprotocol/clientInfo"]["name"],
            "palisade"
        );
        assert_eq!(
            p["_meta"]["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
        let mut q = Map::new();
        Era::Handshake.stamp(&mut q);
        assert!(
            q.is_empty(),
            "a handshake connection's requests are left alone"
        );
    }

    #[test]
    fn only_an_input_required_result_asks_for_input() {
        let asks = raw(json!({
            "resultType": "input_required",
            "inputRequests": {"r": {"method": "roots/list", "params": {}}},
            "requestState": "sealed"
        }));
        let ir = input_required(asks.get()).unwrap();
        assert_eq!(ir.input_requests["r"]["method"], "roots/list");
        assert_eq!(ir.request_state, Some(json!("sealed")));
        // The tag as text inside a complete result is not a question.
        let text = raw(json!({"resultType": "complete",
            "content": [{"type": "text", "text": "\"input_required\""}]}));
        assert!(input_required(text.get()).is_none());
        assert!(input_required(raw(json!({"content": []})).get()).is_none());
    }

    #[test]
    fn a_retry_carries_this_rounds_answers_and_state_only() {
        let original = json!({"name": "t", "arguments": {"a": 1}})
            .as_object()
            .unwrap()
            .clone();
        let mut answers = Map::new();
        answers.insert("r".into(), json!({"roots": []}));
        let p = retry_params(&original, answers, Some(json!("s1")));
        assert_eq!(p["requestState"], "s1");
        assert_eq!(p["inputResponses"]["r"]["roots"], json!([]));
        assert_eq!(p["arguments"]["a"], 1);
        let again = retry_params(&p, Map::new(), None);
        assert!(again.get("requestState").is_none());
        assert_eq!(again["inputResponses"], json!({}));
    }
}
