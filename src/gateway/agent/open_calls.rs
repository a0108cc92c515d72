//! The requests forwarded to each server on an agent's behalf and not yet answered, and how
//! each reaches the agent that made it: a 2026-07-28 call in its next round (`mrtr`), a
//! session's call on the HTTP fast path on its own stream (`asking`), any other in its
//! session. A server's sampling or elicitation request (`server/relay/`) comes with no mark
//! of the request it serves (only a task's requests name their task), so it goes to the one
//! request open to its server, or to the one agent all of them came from; with requests of
//! several agents open, there is no telling.
//!
//! Never: guess between requests of different agents (a question could reach another
//! client's agent), or forget a request in flight because it cannot carry a question (it
//! is still a request the question may belong to).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::service::{Peer, RequestContext};
use rmcp::RoleServer;

use super::asking::Asker;
use super::mrtr::Round;

tokio::task_local! {
    static CALLER: Caller;
}

/// How an open request reaches its agent.
#[derive(Clone)]
pub enum Carrier {
    /// A 2026-07-28 call: the request goes in its next round.
    Round(Arc<Round>),
    /// A session's call answered on a stream of its own: the request goes on it.
    Stream(Arc<Asker>),
    /// A request with neither, in a session: the server's request goes to that session (the
    /// stdio agent's connection, or an HTTP session's own stream).
    Session(Peer<RoleServer>),
    /// A request with neither and no session (a 2026-07-28 HTTP request other than a call):
    /// its agent cannot be asked.
    Sessionless,
}

/// Which agent made a request: the one agent of the stdio front, an HTTP session's, or one
/// of its own (a 2026-07-28 HTTP request, with no session to share).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Agent {
    Stdio,
    Session(String),
    Alone,
}

impl Agent {
    fn same(&self, other: &Agent) -> bool {
        self == other && *self != Agent::Alone
    }
}

/// The HTTP session a request served by the fast path came in (`None`: a 2026-07-28
/// request, in no session), put in its context's extensions; rmcp's path puts the HTTP
/// request's parts there instead.
#[derive(Clone)]
pub struct InSession(pub Option<String>);

/// A request's agent and how it is reached.
#[derive(Clone)]
pub struct Caller {
    pub carrier: Carrier,
    pub agent: Agent,
    /// The session's peer (a 2026-07-28 HTTP request's own, when it has none).
    peer: Peer<RoleServer>,
}

impl Caller {
    /// The caller of the request the current task serves with `ctx`: its 2026-07-28 round,
    /// its own stream, else its session.
    pub fn of(ctx: &RequestContext<RoleServer>) -> Caller {
        let agent = agent_of(ctx);
        let carrier = super::mrtr::current()
            .map(Carrier::Round)
            .or_else(|| super::asking::current().map(Carrier::Stream))
            .unwrap_or_else(|| match agent {
                Agent::Alone => Carrier::Sessionless,
                _ => Carrier::Session(ctx.peer.clone()),
            });
        Caller {
            carrier,
            agent,
            peer: ctx.peer.clone(),
        }
    }

    fn carries_itself(&self) -> bool {
        matches!(self.carrier, Carrier::Round(_) | Carrier::Stream(_))
    }
}

/// Which agent made the request of `ctx`: the fast path says which session it came in, rmcp's
/// path leaves the HTTP request's head, and the stdio front neither. rmcp checks a session id
/// only for the requests it serves in that session: one it serves outside any
/// (`versions::served_sessionless`) names none, whatever its header says.
/// The agent that made the request `ctx` serves.
pub fn agent_of(ctx: &RequestContext<RoleServer>) -> Agent {
    if let Some(InSession(session)) = ctx.extensions.get::<InSession>() {
        return session.clone().map_or(Agent::Alone, Agent::Session);
    }
    match ctx.extensions.get::<axum::http::request::Parts>() {
        Some(parts) => {
            let header = |name| parts.headers.get(name).and_then(|v| v.to_str().ok());
            if super::versions::served_sessionless(&ctx.meta, header("mcp-protocol-version")) {
                return Agent::Alone;
            }
            header("mcp-session-id").map_or(Agent::Alone, |id| Agent::Session(id.to_string()))
        }
        None => Agent::Stdio,
    }
}

/// Runs `fut` (an approval) with `caller` as the way to its agent.
pub async fn scope<F: std::future::Future>(caller: Caller, fut: F) -> F::Output {
    CALLER.scope(caller, fut).await
}

/// The caller of the approval this task runs, if one was given (`scope`).
pub fn current() -> Option<Caller> {
    CALLER.try_with(Clone::clone).ok()
}

/// Why a server's request cannot be told to one open request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Untold {
    #[error("{}", self.text())]
    NoCall,
    #[error("{}", self.text())]
    Several,
    #[error("{}", self.text())]
    UnknownTask,
}

impl Untold {
    /// The reason, as text that lives as long as the program.
    pub fn text(self) -> &'static str {
        match self {
            Untold::NoCall => "no request to this server is in flight to carry it to the client",
            Untold::Several => {
                "several requests to this server are in flight, so palisade cannot tell which \
                 one it belongs to"
            }
            Untold::UnknownTask => {
                "it names a task palisade does not know the maker of, so palisade cannot tell \
                 whose it is"
            }
        }
    }
}

/// One open request: its key, the server's id of the task it reads (`tasks/*`), its caller.
struct OpenCall {
    id: u64,
    task: Option<String>,
    caller: Caller,
}

/// How many tasks' makers are remembered (the oldest forgotten first): a task's own requests
/// go to the agent that made it.
const TASK_OWNERS: usize = 4096;

/// The open requests, by server; and who made each task, by server and the server's task id.
#[derive(Default)]
pub struct OpenCalls {
    map: Mutex<HashMap<String, Vec<OpenCall>>>,
    next: AtomicU64,
    owners: Mutex<TaskOwners>,
}

/// The agents that made the tasks, oldest first.
#[derive(Default)]
struct TaskOwners {
    by_task: HashMap<(String, String), Caller>,
    order: VecDeque<(String, String)>,
}

/// Keeps a request registered as open; dropping it closes the request.
pub struct Open {
    calls: Arc<OpenCalls>,
    server: String,
    id: u64,
}

impl Drop for Open {
    fn drop(&mut self) {
        let mut map = lock(&self.calls.map);
        if let Some(v) = map.get_mut(&self.server) {
            v.retain(|call| call.id != self.id);
            if v.is_empty() {
                map.remove(&self.server);
            }
        }
    }
}

impl OpenCalls {
    /// Registers a request to `server` (reading the server's task `task`, if any) made by
    /// `caller`, until the `Open` is dropped.
    pub fn open(self: &Arc<Self>, server: &str, task: Option<&str>, caller: Caller) -> Open {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.map)
            .entry(server.to_string())
            .or_default()
            .push(OpenCall {
                id,
                task: task.map(str::to_string),
                caller,
            });
        Open {
            calls: self.clone(),
            server: server.to_string(),
            id,
        }
    }

    /// Remembers that `caller` made task `task` of `server` (the server's id): the task's
    /// own requests go to that agent.
    pub fn task_made(&self, server: &str, task: &str, caller: &Caller) {
        let key = (server.to_string(), task.to_string());
        let made = Caller {
            // The call that made it has ended: the agent is reached in its session.
            carrier: match caller.agent {
                Agent::Alone => Carrier::Sessionless,
                _ => Carrier::Session(caller.peer.clone()),
            },
            agent: caller.agent.clone(),
            peer: caller.peer.clone(),
        };
        let mut owners = lock(&self.owners);
        if owners.by_task.insert(key.clone(), made).is_none() {
            owners.order.push_back(key);
        }
        while owners.order.len() > TASK_OWNERS {
            if let Some(oldest) = owners.order.pop_front() {
                owners.by_task.remove(&oldest);
            }
        }
    }

    /// How a request from `server` reaches the agent it serves. A request naming its task
    /// `task` goes to the agent that made the task: a request of that agent reading the task,
    /// else one of its open requests (by the rules below), else its session; a task palisade
    /// does not know the maker of is refused. Otherwise the one request open takes it, or,
    /// when all of them are one agent's, the one of them that carries its own questions, else
    /// that agent's session. With none, or requests of several agents, there is no telling.
    pub fn only(&self, server: &str, task: Option<&str>) -> Result<Carrier, Untold> {
        let map = lock(&self.map);
        let all = map.get(server).map(Vec::as_slice).unwrap_or_default();
        let Some(task) = task else {
            return one_agents(&all.iter().collect::<Vec<_>>());
        };
        let owner = lock(&self.owners)
            .by_task
            .get(&(server.to_string(), task.to_string()))
            .cloned()
            .ok_or(Untold::UnknownTask)?;
        // A 2026-07-28 HTTP maker is an agent of its own: its later requests cannot be told
        // from another's, so only the requests reading the task are taken as its.
        let its = |call: &&OpenCall| match owner.agent {
            Agent::Alone => call.caller.agent == Agent::Alone,
            _ => call.caller.agent.same(&owner.agent),
        };
        let reading: Vec<&OpenCall> = all
            .iter()
            .filter(|call| call.task.as_deref() == Some(task))
            .filter(its)
            .collect();
        if !reading.is_empty() {
            return one_agents(&reading);
        }
        let others: Vec<&OpenCall> = match owner.agent {
            Agent::Alone => Vec::new(),
            _ => all.iter().filter(its).collect(),
        };
        match one_agents(&others) {
            Err(Untold::NoCall) => Ok(owner.carrier),
            told => told,
        }
    }
}

/// The carrier of `open` by the rules of `OpenCalls::only`.
fn one_agents(open: &[&OpenCall]) -> Result<Carrier, Untold> {
    let (first, rest) = open.split_first().ok_or(Untold::NoCall)?;
    if rest.is_empty() {
        return Ok(first.caller.carrier.clone());
    }
    if !rest
        .iter()
        .all(|c| c.caller.agent.same(&first.caller.agent))
    {
        return Err(Untold::Several);
    }
    // One agent's requests, any of which it may serve: the one of them whose own stream or
    // round the agent is reading, when there is one; else its session.
    let mut own = open.iter().filter(|c| c.caller.carries_itself());
    match (own.next(), own.next()) {
        (Some(one), None) => Ok(one.caller.carrier.clone()),
        _ if first.caller.peer.peer_info().is_some() && first.caller.agent != Agent::Alone => {
            Ok(Carrier::Session(first.caller.peer.clone()))
        }
        _ => Err(Untold::Several),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each change is one push or retain: a panic elsewhere cannot leave it half-changed.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::InitializeRequestParams;
    use rmcp::service::RunningService;

    /// A service that never hears from anyone: only its peer is used.
    #[derive(Clone)]
    struct Quiet;
    impl rmcp::ServerHandler for Quiet {}

    /// A session's peer (with the `initialize` a session keeps, unless `sessionless`), and
    /// what keeps it open.
    fn session(sessionless: bool) -> (Peer<RoleServer>, RunningService<RoleServer, Quiet>) {
        let (ours, _theirs) = tokio::io::duplex(64);
        let info = (!sessionless).then(InitializeRequestParams::default);
        let running = rmcp::service::serve_directly(Quiet, ours, info);
        (running.peer().clone(), running)
    }

    fn caller(carrier: Carrier, agent: Agent, peer: &Peer<RoleServer>) -> Caller {
        Caller {
            carrier,
            agent,
            peer: peer.clone(),
        }
    }

    fn round() -> Carrier {
        Carrier::Round(Arc::new(Round::new(None, None)))
    }

    fn is_round(c: &Result<Carrier, Untold>) -> bool {
        matches!(c, Ok(Carrier::Round(_)))
    }

    fn is_session(c: &Result<Carrier, Untold>) -> bool {
        matches!(c, Ok(Carrier::Session(_)))
    }

    #[tokio::test]
    async fn the_agent_of_a_request_is_told_by_where_it_came_from() {
        let (peer, _running) = session(false);
        let ctx = |extend: &dyn Fn(&mut RequestContext<RoleServer>)| {
            let mut ctx = RequestContext::new(rmcp::model::NumberOrString::Number(1), peer.clone());
            extend(&mut ctx);
            agent_of(&ctx)
        };
        let head = |session: &str| {
            axum::http::Request::builder()
                .header("mcp-session-id", session)
                .body(())
                .unwrap()
                .into_parts()
                .0
        };
        let modern: rmcp::model::RequestMetaObject = serde_json::from_value(serde_json::json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28"
        }))
        .unwrap();
        // The stdio front: neither mark.
        assert_eq!(ctx(&|_| {}), Agent::Stdio);
        // The fast path says.
        assert_eq!(
            ctx(&|c| {
                c.extensions.insert(InSession(Some("s1".into())));
            }),
            Agent::Session("s1".into())
        );
        assert_eq!(
            ctx(&|c| {
                c.extensions.insert(InSession(None));
            }),
            Agent::Alone
        );
        // rmcp's path: the session it served the request in.
        assert_eq!(
            ctx(&|c| {
                c.extensions.insert(head("s2"));
            }),
            Agent::Session("s2".into())
        );
        // A 2026-07-28 request naming a session it is not served in names none.
        assert_eq!(
            ctx(&|c| {
                c.extensions.insert(head("s2"));
                c.meta = modern.clone();
            }),
            Agent::Alone
        );
    }

    #[tokio::test]
    async fn a_request_goes_to_the_one_open_request_or_its_one_agent_and_never_guesses() {
        let (a, _a) = session(false);
        let (b, _b) = session(false);
        let calls = Arc::new(OpenCalls::default());
        let sa = || caller(Carrier::Session(a.clone()), Agent::Session("a".into()), &a);
        let sb = || caller(Carrier::Session(b.clone()), Agent::Session("b".into()), &b);
        assert_eq!(calls.only("fs", None).err(), Some(Untold::NoCall));
        let first = calls.open("fs", None, sa());
        let _other_server = calls.open("git", None, sb());
        assert!(is_session(&calls.only("fs", None)));
        // Two requests of session a: a's.
        let second = calls.open("fs", None, sa());
        assert!(is_session(&calls.only("fs", None)));
        // One of them carries its own questions: it takes them.
        let own = calls.open("fs", None, caller(round(), Agent::Session("a".into()), &a));
        assert!(is_round(&calls.only("fs", None)));
        // A request of session b too: no telling.
        let of_b = calls.open("fs", None, sb());
        assert_eq!(calls.only("fs", None).err(), Some(Untold::Several));
        drop((of_b, own, second, first));
        assert_eq!(calls.only("fs", None).err(), Some(Untold::NoCall));
    }

    #[tokio::test]
    async fn agents_of_their_own_are_never_one_and_a_session_is_needed_to_share() {
        let (lone, _lone) = session(false);
        let (stdio, _stdio) = session(true);
        let calls = Arc::new(OpenCalls::default());
        // Two 2026-07-28 HTTP requests: each its own agent.
        let one = calls.open(
            "fs",
            None,
            caller(Carrier::Sessionless, Agent::Alone, &lone),
        );
        let two = calls.open(
            "fs",
            None,
            caller(Carrier::Sessionless, Agent::Alone, &lone),
        );
        assert_eq!(calls.only("fs", None).err(), Some(Untold::Several));
        drop((one, two));
        // A 2026-07-28 stdio agent's two calls: one agent, but two rounds and no session.
        let one = calls.open("fs", None, caller(round(), Agent::Stdio, &stdio));
        let two = calls.open("fs", None, caller(round(), Agent::Stdio, &stdio));
        assert_eq!(calls.only("fs", None).err(), Some(Untold::Several));
        drop(two);
        // Its call and a routed request: the call's round.
        let _routed = calls.open(
            "fs",
            None,
            caller(Carrier::Session(stdio.clone()), Agent::Stdio, &stdio),
        );
        assert!(is_round(&calls.only("fs", None)));
        drop(one);
    }

    #[tokio::test]
    async fn a_request_naming_its_task_goes_to_its_maker_only() {
        let (a, _a) = session(false);
        let (b, _b) = session(false);
        let calls = Arc::new(OpenCalls::default());
        let of_a = || caller(Carrier::Session(a.clone()), Agent::Session("a".into()), &a);
        let of_b = || caller(Carrier::Session(b.clone()), Agent::Session("b".into()), &b);
        let is_as = |told: &Result<Carrier, Untold>| {
            matches!(told, Ok(Carrier::Session(p))
                if p.peer_info().is_some_and(|i| Arc::ptr_eq(&i, &a.peer_info().unwrap())))
        };
        calls.task_made("fs", "t1", &of_a());
        // Only b has requests open, one of them reading a's task: a's task still goes to a.
        let _call_of_b = calls.open("fs", None, of_b());
        let _b_reads = calls.open(
            "fs",
            Some("t1"),
            caller(round(), Agent::Session("b".into()), &b),
        );
        assert!(
            is_as(&calls.only("fs", Some("t1"))),
            "went elsewhere than a"
        );
        // A request of a's reading it takes it.
        let _a_reads = calls.open(
            "fs",
            Some("t1"),
            caller(round(), Agent::Session("a".into()), &a),
        );
        assert!(is_round(&calls.only("fs", Some("t1"))));
        // A task palisade did not see made: whose it is cannot be told.
        assert_eq!(
            calls.only("fs", Some("t2")).err(),
            Some(Untold::UnknownTask)
        );
        // Naming no task, it could be either's.
        assert_eq!(calls.only("fs", None).err(), Some(Untold::Several));
    }
}
