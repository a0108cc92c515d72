//! The I/O side of the tasks extension bridge (`tasks_v2.rs` is the pure side): which call
//! becomes a task, and a `tasks/*` request of an extension agent answered from the servers'
//! 2025-11-25 tasks through `call/task_relay.rs`. Used by the stdio front and by the HTTP
//! front's handler alike.

use rmcp::model::ErrorData;
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::gateway::agent::tasks_v2;
use crate::gateway::state::Shared;

/// Whether the tool a call names must run as a task (its server's own listing says so).
pub fn requires_task(shared: &Shared, name: &str) -> bool {
    let catalog = shared.catalog();
    let Ok(route) = catalog.tool(name) else {
        return false;
    };
    let Some(live) = shared.slots[route.server].snapshot().live else {
        return false;
    };
    let required = live
        .lists
        .raw
        .tools
        .get(&route.name)
        .is_some_and(tasks_v2::required);
    required
}

pub fn not_updatable() -> ErrorData {
    ErrorData::invalid_params(
        "tasks/update: the task's server speaks 2025-11-25 tasks, which take no input by update",
        None,
    )
}

/// A `tasks/*` request of an agent that speaks the tasks extension, answered in its terms
/// from the server's 2025-11-25 tasks (see `tasks_v2.rs`).
pub async fn answer(
    shared: &Shared,
    method: &str,
    params: Option<&RawValue>,
    ctx: &RequestContext<RoleServer>,
) -> Result<Value, ErrorData> {
    use crate::gateway::call::task_relay::handle;
    match method {
        "tasks/get" => {
            let v1 = handle(shared, "tasks/get", params, ctx).await?;
            let mut task = tasks_v2::detailed(&v1);
            if tasks_v2::needs_result(&task) {
                let result = handle(shared, "tasks/result", params, ctx)
                    .await
                    .map_err(|e| (e.code.0, e.message.to_string()));
                tasks_v2::finished(&mut task, result);
            }
            Ok(task)
        }
        "tasks/cancel" => {
            handle(shared, "tasks/cancel", params, ctx).await?;
            Ok(Value::Object(Map::new()))
        }
        "tasks/update" => Err(not_updatable()),
        other => handle(shared, other, params, ctx).await,
    }
}
