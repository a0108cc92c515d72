//! The per-principal request cap of the HTTP front: at most `maxRequestsPerPrincipal` of a
//! principal's POSTs are in flight at once (a POST is in flight until its response body,
//! SSE stream included, ends), so one principal's flood of slow calls cannot take every
//! worker, server slot and approval from the others. A POST over the cap that carries a
//! JSON-RPC request is refused (HTTP 429, `Retry-After`, a JSON-RPC error with the request's
//! id, which the MCP SDK clients surface as the call's error); one that carries only
//! responses or notifications passes, since refusing an answer to a server's own request
//! (an elicitation, a roots listing) would stall the very calls holding the slots.
//!
//! Optionally (`requestsPerMinute`, with a burst of `requestBurst`) a principal's requests
//! are also rate-limited by a token bucket of its own, with the same refusal.
//!
//! Pure apart from the semaphore: `classify` reads a body, it never touches the network;
//! the bucket takes the time from its caller.
//!
//! Never: refuse a principal for another principal's load, or let a refused request reach
//! a server.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A principal's slots for requests in flight.
#[derive(Debug)]
pub struct RequestCap {
    slots: Arc<Semaphore>,
    max: usize,
}

impl RequestCap {
    pub fn new(max: usize) -> RequestCap {
        RequestCap {
            slots: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// A slot, held until the permit is dropped; `None` when every slot is taken.
    pub fn try_enter(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.slots).try_acquire_owned().ok()
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.max.saturating_sub(self.slots.available_permits())
    }

    pub fn max(&self) -> usize {
        self.max
    }
}

/// A token bucket: `burst` requests at once, refilled at `per_minute`.
#[derive(Debug)]
pub struct RateLimit {
    per_minute: u32,
    burst: u32,
    /// Tokens left and when they were counted.
    state: Mutex<(f64, Instant)>,
}

impl RateLimit {
    pub fn new(per_minute: u32, burst: u32, now: Instant) -> RateLimit {
        RateLimit {
            per_minute,
            burst: burst.max(1),
            state: Mutex::new((f64::from(burst.max(1)), now)),
        }
    }

    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// Takes `n` tokens at `now`, or says how long until they would be there.
    pub fn take(&self, n: usize, now: Instant) -> Result<(), Duration> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let rate = f64::from(self.per_minute) / 60.0;
        let elapsed = now.saturating_duration_since(st.1).as_secs_f64();
        let tokens = (st.0 + elapsed * rate).min(f64::from(self.burst));
        st.1 = now;
        let want = n as f64;
        if tokens >= want {
            st.0 = tokens - want;
            return Ok(());
        }
        st.0 = tokens;
        if rate <= 0.0 || want > f64::from(self.burst) {
            return Err(Duration::from_secs(60));
        }
        Err(Duration::from_secs_f64((want - tokens) / rate))
    }
}

/// One JSON-RPC request a POST carried, as far as its refusal and audit record need it.
#[derive(Debug, Clone, PartialEq)]
pub struct Asked {
    /// The request's id, echoed in the refusal.
    pub id: Value,
    pub method: String,
    /// `params.name` of a `tools/call`.
    pub tool: Option<String>,
    /// `params.arguments` of a `tools/call`.
    pub arguments: Map<String, Value>,
}

/// What a POST body carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Carried {
    /// At least one request (or a body that is not JSON-RPC at all: refused like a request,
    /// never waved through).
    Requests(Vec<Asked>),
    /// Only responses and notifications: never refused by the cap.
    Replies,
}

/// The ids of the requests a POST body carries (responses and notifications have none to
/// answer), read without building the rest: what a call cut at shutdown is answered with.
pub fn request_ids(body: &[u8]) -> Vec<Value> {
    #[derive(serde::Deserialize)]
    struct Head {
        id: Option<Value>,
        method: Option<serde::de::IgnoredAny>,
    }
    // A batch is tried first: serde reads a struct from an array too (its members in
    // order), so a two-message batch read as `One` gave its first message as an id.
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Messages {
        Many(Vec<Head>),
        One(Head),
    }
    let heads = match serde_json::from_slice::<Messages>(body) {
        Ok(Messages::One(h)) => vec![h],
        Ok(Messages::Many(hs)) => hs,
        Err(_) => Vec::new(),
    };
    heads
        .into_iter()
        .filter(|h| h.method.is_some())
        .filter_map(|h| h.id)
        .collect()
}

/// Reads a POST body (one message, or a batch) for the cap.
pub fn classify(body: &[u8]) -> Carried {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return Carried::Requests(Vec::new());
    };
    let messages = match value {
        Value::Array(items) => items,
        one => vec![one],
    };
    if messages.is_empty() {
        return Carried::Requests(Vec::new());
    }
    let mut asked = Vec::new();
    for m in &messages {
        let Some(obj) = m.as_object() else {
            return Carried::Requests(Vec::new());
        };
        let (Some(method), Some(id)) = (obj.get("method").and_then(Value::as_str), obj.get("id"))
        else {
            continue;
        };
        let params = obj.get("params");
        let is_call = method == "tools/call";
        asked.push(Asked {
            id: id.clone(),
            method: method.to_string(),
            tool: params
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                .filter(|_| is_call)
                .map(str::to_string),
            arguments: params
                .and_then(|p| p.get("arguments"))
                .and_then(Value::as_object)
                .filter(|_| is_call)
                .cloned()
                .unwrap_or_default(),
        });
    }
    if asked.is_empty() {
        Carried::Replies
    } else {
        Carried::Requests(asked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_are_told_from_replies_and_notifications() {
        let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "fs__read", "arguments": {"path": "/x"}}});
        let Carried::Requests(asked) = classify(call.to_string().as_bytes()) else {
            panic!("a call is a request");
        };
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].id, json!(7));
        assert_eq!(asked[0].tool.as_deref(), Some("fs__read"));
        assert_eq!(asked[0].arguments["path"], "/x");
        let list = json!({"jsonrpc": "2.0", "id": "a", "method": "tools/list"});
        let Carried::Requests(asked) = classify(list.to_string().as_bytes()) else {
            panic!("a listing is a request");
        };
        assert_eq!(
            (asked[0].method.as_str(), asked[0].tool.clone()),
            ("tools/list", None)
        );
        for reply in [
            json!({"jsonrpc": "2.0", "id": "s-1", "result": {"action": "accept"}}),
            json!({"jsonrpc": "2.0", "id": "s-2", "error": {"code": -1, "message": "no"}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!([{"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": 1}}]),
        ] {
            assert_eq!(
                classify(reply.to_string().as_bytes()),
                Carried::Replies,
                "{reply}"
            );
        }
    }

    #[test]
    fn request_ids_are_the_ids_of_requests_only() {
        let call = json!({"jsonrpc": "2.0", "id": "c-1", "method": "tools/call",
            "params": {"name": "x", "arguments": {"big": "y"}}});
        assert_eq!(request_ids(call.to_string().as_bytes()), vec![json!("c-1")]);
        let mixed = json!([{"jsonrpc": "2.0", "id": 3, "result": {}},
                           {"jsonrpc": "2.0", "method": "notifications/initialized"},
                           {"jsonrpc": "2.0", "id": 4, "method": "ping"}]);
        assert_eq!(request_ids(mixed.to_string().as_bytes()), vec![json!(4)]);
        let two = json!([{"jsonrpc": "2.0", "id": 4, "method": "ping"},
                         {"jsonrpc": "2.0", "id": 3, "result": {}}]);
        assert_eq!(request_ids(two.to_string().as_bytes()), vec![json!(4)]);
        assert!(request_ids(b"not json").is_empty());
    }

    #[test]
    fn what_is_not_json_rpc_counts_as_a_request() {
        for body in [&b"not json"[..], b"[]", b"[1]", b"42"] {
            assert_eq!(classify(body), Carried::Requests(Vec::new()));
        }
        let batch = json!([{"jsonrpc": "2.0", "method": "notifications/initialized"},
                           {"jsonrpc": "2.0", "id": 2, "method": "ping"}]);
        assert!(matches!(
            classify(batch.to_string().as_bytes()),
            Carried::Requests(a) if a.len() == 1
        ));
    }

    #[test]
    fn the_bucket_allows_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let r = RateLimit::new(60, 3, t0);
        assert!(r.take(1, t0).is_ok());
        assert!(r.take(2, t0).is_ok());
        let wait = r.take(1, t0).unwrap_err();
        assert!(
            wait > Duration::from_millis(900) && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert!(r.take(1, t0 + Duration::from_secs(1)).is_ok());
        assert!(r.take(1, t0 + Duration::from_secs(1)).is_err());
        // Idle time refills only up to the burst.
        assert!(r.take(3, t0 + Duration::from_secs(100)).is_ok());
        assert!(r.take(1, t0 + Duration::from_secs(100)).is_err());
        assert!(
            r.take(4, t0 + Duration::from_secs(1000)).is_err(),
            "more than the burst"
        );
    }

    #[test]
    fn slots_are_bounded_and_come_back() {
        let cap = RequestCap::new(2);
        let a = cap.try_enter().unwrap();
        let _b = cap.try_enter().unwrap();
        assert!(cap.try_enter().is_none());
        assert_eq!(cap.in_flight(), 2);
        drop(a);
        assert_eq!(cap.in_flight(), 1);
        assert!(cap.try_enter().is_some());
    }
}
