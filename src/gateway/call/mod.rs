//! One tool call, stage by stage: `pipeline::call_tool` reads as its stages (route, agent
//! roots, policy, approval, widen and forward, annotate, audit); stage 3 for an escalation
//! is `approve`, stages 4 and 5 are `forward`. The stages' helpers live beside them
//! (`blocked`: the `[SANDBOX BLOCKED]` classifier; `widen` and `applied`: an approval's new
//! roots and the relaunch; `remembered`: approvals remembered for the session); `tasks` and
//! `task_relay` carry a task-augmented call past its creation. `tests` runs the whole
//! pipeline in-process (an in-process server, a raw agent over duplex pipes).

pub mod answer;
pub mod applied;
mod approve;
pub mod as_sent;
pub mod blocked;
mod forward;
pub mod pipeline;
pub mod probe;
pub mod remembered;
pub mod route;
mod stage;
pub mod task_relay;
pub mod tasks;
pub mod widen;

#[cfg(test)]
mod tests;
