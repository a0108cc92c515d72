//! What the relay reads of a server's request and what it keeps: the typed views its
//! checks use beside the fields it relays as the server wrote them, the test for a sampling
//! request that involves tools, and the summaries written to the audit record. Pure: no I/O.

use rmcp::model::CreateMessageRequestParams;
use rmcp::ErrorData;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::gateway::call::as_sent::{members_in, members_of};
use crate::gateway::json_scan::{has_control, member_count};

/// Characters of a prompt or question kept in the audit record.
const EXCERPT: usize = 500;
/// The fields of a plain sampling request (MCP 2025-11-25), relayed as the server wrote
/// them; `_meta` is palisade's own (`name_the_server`).
pub(super) const SAMPLING_FIELDS: &[&str] = &[
    "messages",
    "modelPreferences",
    "systemPrompt",
    "temperature",
    "maxTokens",
    "stopSequences",
    "metadata",
];

/// Whether a sampling request involves tools, which palisade never declares downstream: a
/// list of them, a choice among them, or a message that uses one or answers one (a made-up
/// tool history would have the agent's model act on the server's say).
pub(super) fn uses_tools(p: &CreateMessageRequestParams) -> bool {
    use rmcp::model::{SamplingContent, SamplingMessageContentBlock as Block};
    let tool_block = |b: &Block| matches!(b, Block::ToolUse(_) | Block::ToolResult(_));
    p.tools.is_some()
        || p.tool_choice.is_some()
        || p.messages.iter().any(|m| match &m.content {
            SamplingContent::Single(b) => tool_block(b),
            SamplingContent::Multiple(bs) => bs.iter().any(tool_block),
        })
}

/// A request's params as a typed view (for the checks and the audit record) and as the
/// fields the server wrote (what is relayed, once the typed view has passed it: a field named
/// twice fails the typed read, so the two cannot disagree).
pub(super) fn views<T: serde::de::DeserializeOwned>(
    raw: Option<&RawValue>,
) -> Result<(T, Map<String, Value>), ErrorData> {
    let text = raw.map_or("{}", RawValue::get);
    let fields = serde_json::from_str(text).map_err(invalid)?;
    Ok((typed(raw)?, fields))
}

/// A request's params as a typed view.
pub(super) fn typed<T: serde::de::DeserializeOwned>(
    raw: Option<&RawValue>,
) -> Result<T, ErrorData> {
    serde_json::from_str(raw.map_or("{}", RawValue::get)).map_err(invalid)
}

fn invalid(e: serde_json::Error) -> ErrorData {
    ErrorData::invalid_params(e.to_string(), None)
}

/// The message the user sees, naming the server that asks.
pub fn attribute(server: &str, message: &str) -> String {
    format!("[MCP server \"{server}\" asks, relayed by palisade] {message}")
}

fn excerpt(text: &str) -> String {
    if text.chars().count() <= EXCERPT {
        return text.to_string();
    }
    let mut s: String = text.chars().take(EXCERPT).collect();
    s.push('…');
    s
}

/// What the audit record keeps of a sampling request: sizes and an excerpt of the text.
pub(super) fn sampling_summary(p: &CreateMessageRequestParams) -> Map<String, Value> {
    let mut texts = Vec::new();
    if let Ok(v) = serde_json::to_value(&p.messages) {
        collect_texts(&v, &mut texts);
    }
    let mut m = Map::new();
    m.insert("messages".into(), json!(p.messages.len()));
    // Not `maxTokens`: the audit redactor hides every key that mentions tokens.
    m.insert("maxOutput".into(), json!(p.max_tokens));
    if let Some(s) = &p.system_prompt {
        m.insert("systemPrompt".into(), json!(excerpt(s)));
    }
    m.insert("text".into(), json!(excerpt(&texts.join("\n"))));
    if p.include_context.is_some() {
        m.insert("includeContext".into(), json!("dropped"));
    }
    m
}

fn collect_texts(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(t)) = o.get("text") {
                out.push(t.clone());
            }
            o.values().for_each(|x| collect_texts(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_texts(x, out)),
        _ => {}
    }
}

/// What the audit record keeps of an elicitation: the question and the fields asked for.
pub(super) fn elicitation_summary(
    message: &str,
    url: Option<&str>,
    schema: Option<&Value>,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("message".into(), json!(excerpt(message)));
    if let Some(u) = url {
        m.insert("url".into(), json!(excerpt(u)));
    }
    if let Some(Value::Object(props)) = schema.and_then(|s| s.get("properties")) {
        m.insert("fields".into(), json!(props.keys().collect::<Vec<_>>()));
    }
    m
}

/// A sampling request's params as the agent is asked them: the server's own text of its
/// `SAMPLING_FIELDS` members, in its order, and `meta` (JSON text) as `_meta`; `read` is the
/// whole params as serde read them. `None` (the caller re-encodes `read`'s members) when the
/// text holds a control byte or writes a key twice or with an escape at any depth: what is
/// relayed must be what the checks read (`uses_tools` looked at the typed view), and one
/// line.
pub(super) fn sampling_as_written(
    raw: &RawValue,
    read: &Map<String, Value>,
    meta: &str,
) -> Option<Box<RawValue>> {
    let text = raw.get();
    let b = text.as_bytes();
    if has_control(b) || member_count(b) != Some(members_of(read)) {
        return None;
    }
    let mut out = String::with_capacity(text.len() + meta.len() + 12);
    out.push('{');
    crate::gateway::json_scan::object_members(b, |key, span| {
        if SAMPLING_FIELDS.iter().any(|f| f.as_bytes() == key) {
            if out.len() > 1 {
                out.push(',');
            }
            crate::gateway::json_scan::push_member(&mut out, key, &text[span])?;
        }
        Some(())
    })?;
    if out.len() > 1 {
        out.push(',');
    }
    out.push_str("\"_meta\":");
    out.push_str(meta);
    out.push('}');
    RawValue::from_string(out).ok()
}

/// The agent's answer as the server that asked gets it: as the agent wrote it when it holds
/// no control byte and writes no key twice or with an escape at any depth (counted against serde's
/// reading, as a call's params are, `call/as_sent.rs`), else re-encoded, compact, from that
/// reading.
///
/// Why: the server reads one message per line, and a raw line break between the answer's
/// tokens (a pretty-printed POST body, a `\r` on stdio) would let an agent's answer smuggle a
/// line of its own into the server's stdin; and of a key written twice, the server's decoder
/// could keep the copy the relay's check did not read.
pub(super) fn for_the_server(answer: Box<RawValue>) -> serde_json::Result<Box<RawValue>> {
    let read: Value = serde_json::from_str(answer.get())?;
    let b = answer.get().as_bytes();
    if !has_control(b) && member_count(b) == Some(members_in(&read)) {
        return Ok(answer);
    }
    serde_json::value::to_raw_value(&read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sampling_request_goes_to_the_agent_in_the_servers_words_less_what_is_not_relayed() {
        let relayed = |text: &str| {
            let raw = RawValue::from_string(text.to_string()).unwrap();
            let read: Map<String, Value> = serde_json::from_str(text).unwrap();
            sampling_as_written(&raw, &read, r#"{"s":"x"}"#).map(|r| r.get().to_string())
        };
        let text = r#"{"maxTokens":1e2,"includeContext":"allServers","messages":[{"role":"user","content":{"type":"text","text":"hi","n":1.50}}],"_meta":{"progressToken":7},"temperature":0.70}"#;
        assert_eq!(
            relayed(text).unwrap(),
            r#"{"maxTokens":1e2,"messages":[{"role":"user","content":{"type":"text","text":"hi","n":1.50}}],"temperature":0.70,"_meta":{"s":"x"}}"#
        );
        // A key written twice, or a raw line break: not as written.
        assert_eq!(
            relayed(r#"{"maxTokens":1,"messages":[{"a":1,"a":2}]}"#),
            None
        );
        assert_eq!(relayed("{\"maxTokens\":1,\n\"messages\":[]}"), None);
    }

    #[test]
    fn an_answer_goes_to_the_server_as_written_unless_it_breaks_lines_or_repeats_a_key() {
        let relayed = |text: &str| {
            let raw = RawValue::from_string(text.to_string()).unwrap();
            for_the_server(raw).unwrap().get().to_string()
        };
        let plain = r#"{"z":{"n":1e3},"role":"assistant","_meta":{"k":1.50}}"#;
        assert_eq!(relayed(plain), plain);
        // A line break between tokens: one compact line, the same members.
        let broken = "{\"role\":\"assistant\",\r\n\"x\":{\"jsonrpc\":\"2.0\",\"method\":\"m\"}\t}";
        let got = relayed(broken);
        assert!(!has_control(got.as_bytes()), "{got:?}");
        assert_eq!(
            got,
            r#"{"role":"assistant","x":{"jsonrpc":"2.0","method":"m"}}"#
        );
        // A key written twice at depth: one copy, the one serde read.
        let twice = r#"{"role":"assistant","_meta":{"k":1,"k":2}}"#;
        assert_eq!(relayed(twice), r#"{"role":"assistant","_meta":{"k":2}}"#);
    }

    #[test]
    fn sampling_with_tools_anywhere_is_told_apart() {
        let params = |extra: Value, content: Value| -> CreateMessageRequestParams {
            let mut v = json!({"messages": [{"role": "assistant", "content": content}],
                               "maxTokens": 5});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            serde_json::from_value(v).unwrap()
        };
        let text = json!({"type": "text", "text": "hi"});
        let tool_use = json!({"type": "tool_use", "id": "u1", "name": "fs__write",
                              "input": {"path": "/x"}});
        assert!(!uses_tools(&params(json!({}), text.clone())));
        assert!(uses_tools(&params(
            json!({"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}),
            text.clone()
        )));
        assert!(uses_tools(&params(json!({}), tool_use.clone())));
        assert!(uses_tools(&params(json!({}), json!([text, tool_use]))));
    }

    #[test]
    fn summaries_keep_sizes_and_excerpts_and_elicitations_name_the_server() {
        let p: CreateMessageRequestParams = serde_json::from_value(json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": "x".repeat(600)}}],
            "maxTokens": 5,
            "includeContext": "allServers"
        }))
        .unwrap();
        let s = sampling_summary(&p);
        assert_eq!(s["messages"], json!(1));
        assert_eq!(s["maxOutput"], json!(5));
        assert_eq!(s["text"].as_str().unwrap().chars().count(), EXCERPT + 1);
        assert_eq!(s["includeContext"], json!("dropped"));
        let e = elicitation_summary(
            "name?",
            None,
            Some(&json!({"type": "object", "properties": {"name": {"type": "string"}}})),
        );
        assert_eq!(e["fields"], json!(["name"]));
        assert!(attribute("everything", "Your name?").contains("\"everything\""));
        assert!(attribute("everything", "Your name?").ends_with("Your name?"));
    }
}
