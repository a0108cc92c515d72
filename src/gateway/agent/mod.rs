//! The agent's side of the gateway: how the agent's messages come in and answers go back.
//!
//! `front` owns the agent's stdio (tools/call and tasks answered from the raw line, the rest
//! handed to rmcp's session: `relaying` relays the servers' answers as their bytes, `service` makes
//! the rest); `http/` is the Streamable HTTP front; `frame` caps
//! the agent's lines; `stdio` puts stdin/stdout on the reactor; `link` is the one way back to
//! the agent for requests and notifications; `agent_roots` the agent's declared roots;
//! `versions` the bridge between protocol revisions; `running` the requests a front answers on
//! their own tasks, for `notifications/cancelled` to find; `asking` a call's questions to its
//! own agent on its own stream (HTTP).

pub mod agent_roots;
pub mod asking;
pub mod frame;
pub mod front;
pub mod http;
pub mod link;
pub mod mrtr;
pub mod open_calls;
pub mod relaying;
pub mod request_stream;
pub mod running;
pub mod service;
pub mod stdio;
pub mod task_bridge;
pub mod tasks_v2;
pub mod versions;
