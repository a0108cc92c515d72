//! A 2026-07-28 request's error: rmcp answers the kinds it refuses by status (method not
//! found 404; header mismatch, missing capability, unsupported version 400) as the error
//! alone, JSON under that status, and everything else 200. Its path waits for the
//! request's first message to know which. The fast path answers the same, streamed or not.

use super::client::*;
use super::*;

/// How a call asks for its error.
#[derive(Clone, Copy, Debug)]
struct Ask {
    code: i64,
    /// It carries a progress token (its answer may be a stream).
    token: bool,
    /// The server sends a progress notification before the error.
    note: bool,
}

/// One 2026-07-28 `tools/call` of `faulty__fail` as alice; `rmcp` adds a member the fast
/// path does not take, which sends the same request through rmcp's path (rmcp ignores it).
fn fail(front: &Front, id: u64, ask: Ask, rmcp: bool) -> Answer {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    if ask.token {
        meta["progressToken"] = json!(format!("p{id}"));
    }
    let mut body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": "faulty__fail",
                                     "arguments": {"code": ask.code, "progress": ask.note},
                                     "_meta": meta}});
    if rmcp {
        body["x.example/route"] = json!(1);
    }
    front.post(
        None,
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "faulty__fail"),
        ],
        &body,
    )
}

/// What a client sees of an answer: its status, whether it is JSON or SSE, and the error
/// code it carries.
fn kind(a: &Answer) -> (u16, bool, Value) {
    let json_body = Answer::is(&a.head, "application/json");
    let msg: Value = serde_json::from_str(&a.message)
        .unwrap_or_else(|e| panic!("not one JSON-RPC message ({e}): {a:?}"));
    (a.status, json_body, msg["error"]["code"].clone())
}

#[test]
fn a_2026_error_has_rmcps_status_and_kind_streamed_or_not() {
    let ws = Workspace::new();
    let front = Front::start(&ws, &faulty_config(&ws, json!({})));
    let mut id = 0;
    let mut differ = Vec::new();
    let mut kinds = Vec::new();
    // -32601 (404) and -32020 (header mismatch, 400) are refused by status; -32603 is not.
    for code in [-32601, -32020, -32603] {
        // Without a token the answer is one message; with one, a stream, whose status is
        // known once its first message comes: 200 once a progress notification has.
        for (token, note) in [(false, false), (true, false), (true, true)] {
            let ask = Ask { code, token, note };
            id += 1;
            let fast = fail(&front, id, ask, false);
            id += 1;
            let slow = fail(&front, id, ask, true);
            if kind(&fast) != kind(&slow) {
                differ.push(format!(
                    "{ask:?}: fast {:?}, rmcp {:?}\n  {fast:?}\n  {slow:?}",
                    kind(&fast),
                    kind(&slow)
                ));
            }
            kinds.push((code, token, note, kind(&fast)));
        }
    }
    let served = served(&ws, "tools/call");
    front.stop();
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    // Half the calls went by the fast path, half by rmcp's.
    assert_eq!(served, 9, "{}", ws.stderr_text());
    // And every kind is the one rmcp's rule gives (so both paths did not agree on a wrong
    // one): an error refused by status, when it comes first, alone as JSON under its status;
    // after a progress notification, or of any other kind, 200 SSE.
    let rule = |code: i64, note: bool| match (code, note) {
        (-32601, false) => (404, true),
        (-32020, false) => (400, true),
        _ => (200, false),
    };
    let wrong: Vec<_> = kinds
        .iter()
        .filter(|(code, _, note, got)| {
            let (status, json_body) = rule(*code, *note);
            *got != (status, json_body, json!(code))
        })
        .collect();
    assert!(wrong.is_empty(), "not rmcp's rule: {wrong:?}");
}
