//! An MCP 2025-11-25 session over Streamable HTTP, as the load client needs it:
//! `initialize` (keeping `Mcp-Session-Id`), `notifications/initialized`, `tools/call`, and
//! `DELETE` at the end. Each call names the connection it goes over, so that one session can
//! be driven over several kept-alive connections at once.
//!
//! Never: retry a call (a failure is counted, not hidden), or log the token.

use serde_json::{json, Value};

use super::wire::{Answer, Conn, WireError};

/// The protocol revision negotiated (sessions; the newest where servers may ask for roots).
pub const PROTOCOL: &str = "2025-11-25";

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("HTTP {status}: {message}")]
    Refused { status: u16, message: String },
    #[error("JSON-RPC error: {0}")]
    Rpc(String),
    #[error("no answer to request {0} in the response")]
    NoAnswer(u64),
    #[error("the initialize answer has no Mcp-Session-Id")]
    NoSession,
}

/// How a call ended when the server answered it.
#[derive(Debug, PartialEq, Eq)]
pub enum Called {
    Ok,
    /// A result with `isError: true` (the tool or the policy refused it).
    ToolError,
}

/// One principal's session: its bearer token and session id.
pub struct Session {
    pub path: String,
    bearer: String,
    id: String,
}

impl Session {
    /// `initialize` then `notifications/initialized` over `conn`.
    pub async fn open(conn: &mut Conn, path: &str, token: &str) -> Result<Session, SessionError> {
        let bearer = format!("Bearer {token}");
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name": "palisade-bench-http", "version": env!("CARGO_PKG_VERSION")}}});
        let answer = conn
            .send(
                "POST",
                path,
                &[("Authorization", &bearer)],
                init.to_string().as_bytes(),
            )
            .await?;
        refused(&answer)?;
        answer_to(&answer, 0)?;
        let id = answer
            .header("mcp-session-id")
            .ok_or(SessionError::NoSession)?
            .to_string();
        let session = Session {
            path: path.to_string(),
            bearer,
            id,
        };
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let answer = session.send(conn, "POST", &note).await?;
        refused(&answer)?;
        Ok(session)
    }

    async fn send(&self, conn: &mut Conn, method: &str, body: &Value) -> Result<Answer, WireError> {
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        conn.send(
            method,
            &self.path,
            &[
                ("Authorization", &self.bearer),
                ("Mcp-Session-Id", &self.id),
                ("MCP-Protocol-Version", PROTOCOL),
            ],
            &body,
        )
        .await
    }

    /// `tools/call` with request id `id` (unique among this session's requests in flight).
    pub async fn call(
        &self,
        conn: &mut Conn,
        id: u64,
        tool: &str,
        args: &Value,
    ) -> Result<Called, SessionError> {
        let req = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args}});
        let answer = self.send(conn, "POST", &req).await?;
        refused(&answer)?;
        let result = answer_to(&answer, id)?;
        Ok(if result["isError"] == true {
            Called::ToolError
        } else {
            Called::Ok
        })
    }

    /// Ends the session (`DELETE`); the answer is not judged.
    pub async fn close(&self, conn: &mut Conn) {
        let _ = self.send(conn, "DELETE", &Value::Null).await;
    }
}

/// An answer other than 2xx, with the message of its JSON-RPC error when it has one.
fn refused(answer: &Answer) -> Result<(), SessionError> {
    if (200..300).contains(&answer.status) {
        return Ok(());
    }
    let message = answer
        .messages()
        .first()
        .and_then(|m| m["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| {
            String::from_utf8_lossy(&answer.body)
                .chars()
                .take(200)
                .collect()
        });
    Err(SessionError::Refused {
        status: answer.status,
        message,
    })
}

/// The result of request `id` among the answer's messages.
fn answer_to(answer: &Answer, id: u64) -> Result<Value, SessionError> {
    let msg = answer
        .messages()
        .into_iter()
        .find(|m| m["id"] == id)
        .ok_or(SessionError::NoAnswer(id))?;
    if let Some(e) = msg.get("error") {
        return Err(SessionError::Rpc(
            e["message"].as_str().unwrap_or("(no message)").to_string(),
        ));
    }
    Ok(msg.get("result").cloned().unwrap_or(Value::Null))
}
