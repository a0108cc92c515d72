//! `/metrics` in Prometheus' text format: calls by server, tool, decision and result, their
//! latency, principals active, servers by state, and refusals at the front by reason. Calls
//! are counted from the audit records the principals' gateways write (every call has exactly
//! one), so the figures and the audit log agree.
//!
//! Never: label with a name the agent chose freely (a call no server could route is counted
//! under `tool="(unroutable)"`, so a client cannot grow the label set at will).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::gateway::stages::{CallOutcome, CallRecord};

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 10] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 10.0,
];

#[derive(Debug, Default)]
pub struct Metrics {
    calls: Mutex<BTreeMap<(String, String, String, String), u64>>,
    buckets: [AtomicU64; BUCKETS.len()],
    duration_ms_sum: AtomicU64,
    duration_count: AtomicU64,
    refusals: Mutex<BTreeMap<&'static str, u64>>,
}

impl Metrics {
    /// Counts one audited call.
    pub fn record(&self, rec: &CallRecord) {
        let decision = format!("{:?}", rec.policy_decision.decision).to_lowercase();
        let unroutable = rec.policy_decision.rule.as_deref()
            == Some(crate::gateway::call::route::UNROUTABLE_RULE);
        let (server, tool) = if unroutable {
            ("(unknown)".to_string(), "(unroutable)".to_string())
        } else {
            (rec.server_name.clone(), rec.tool_name.clone())
        };
        let result = match rec.result {
            CallOutcome::Success => "success",
            CallOutcome::Error { .. } => "error",
            CallOutcome::Denied { .. } => "denied",
        };
        *self
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((server, tool, decision, result.to_string()))
            .or_default() += 1;
        let secs = rec.duration_ms as f64 / 1000.0;
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.duration_ms_sum
            .fetch_add(rec.duration_ms, Ordering::Relaxed);
        self.duration_count.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request the front refused (`unauthorized`, `forbidden_origin`, ...).
    pub fn refused(&self, reason: &'static str) {
        *self
            .refusals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(reason)
            .or_default() += 1;
    }

    /// The exposition text; `principals` active now, `servers` counted by state.
    pub fn render(&self, principals: usize, servers: &BTreeMap<String, u64>) -> String {
        let mut s = String::new();
        s.push_str(
            "# HELP palisade_calls_total Audited calls, by server, tool, decision and result.\n",
        );
        s.push_str("# TYPE palisade_calls_total counter\n");
        for ((server, tool, decision, result), n) in
            self.calls.lock().unwrap_or_else(|e| e.into_inner()).iter()
        {
            let _ = writeln!(
                s,
                "palisade_calls_total{{server=\"{}\",tool=\"{}\",decision=\"{}\",result=\"{}\"}} {n}",
                esc(server),
                esc(tool),
                esc(decision),
                esc(result)
            );
        }
        s.push_str(
            "# HELP palisade_call_duration_seconds Time from the call's arrival to its answer.\n",
        );
        s.push_str("# TYPE palisade_call_duration_seconds histogram\n");
        for (i, le) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                s,
                "palisade_call_duration_seconds_bucket{{le=\"{le}\"}} {}",
                self.buckets[i].load(Ordering::Relaxed)
            );
        }
        let count = self.duration_count.load(Ordering::Relaxed);
        let _ = writeln!(
            s,
            "palisade_call_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            s,
            "palisade_call_duration_seconds_sum {}",
            self.duration_ms_sum.load(Ordering::Relaxed) as f64 / 1000.0
        );
        let _ = writeln!(s, "palisade_call_duration_seconds_count {count}");
        s.push_str("# HELP palisade_principals_active Principals whose servers are running.\n");
        s.push_str("# TYPE palisade_principals_active gauge\n");
        let _ = writeln!(s, "palisade_principals_active {principals}");
        s.push_str("# HELP palisade_servers Servers of all principals, by state.\n");
        s.push_str("# TYPE palisade_servers gauge\n");
        for (state, n) in servers {
            let _ = writeln!(s, "palisade_servers{{state=\"{}\"}} {n}", esc(state));
        }
        s.push_str(
            "# HELP palisade_http_refusals_total Requests refused at the front, by reason.\n",
        );
        s.push_str("# TYPE palisade_http_refusals_total counter\n");
        for (reason, n) in self
            .refusals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(s, "palisade_http_refusals_total{{reason=\"{reason}\"}} {n}");
        }
        s
    }
}

/// A label value escaped as the text format asks (backslash, quote, newline).
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::stages::PolicyVerdict;

    #[test]
    fn calls_are_counted_by_labels_and_unroutable_names_do_not_become_labels() {
        let m = Metrics::default();
        let mut rec = CallRecord::new(
            crate::gateway::stages::RecordServer::unstamped("fs"),
            "read",
            "1".into(),
            Default::default(),
            PolicyVerdict::allow("ok"),
            CallOutcome::Success,
        );
        rec.duration_ms = 3;
        m.record(&rec);
        m.record(&rec);
        let mut odd = CallRecord::new(
            crate::gateway::stages::RecordServer::unstamped("x\"y"),
            "anything-the-agent-made-up",
            "2".into(),
            Default::default(),
            PolicyVerdict {
                rule: Some(crate::gateway::call::route::UNROUTABLE_RULE.into()),
                ..PolicyVerdict::deny("no")
            },
            CallOutcome::Denied {
                reason: "no".into(),
            },
        );
        odd.duration_ms = 0;
        m.record(&odd);
        m.refused("unauthorized");
        let text = m.render(1, &[("running".to_string(), 2)].into());
        assert!(text.contains(
            "palisade_calls_total{server=\"fs\",tool=\"read\",decision=\"allow\",result=\"success\"} 2"
        ), "{text}");
        assert!(text.contains("tool=\"(unroutable)\""), "{text}");
        assert!(!text.contains("anything-the-agent-made-up"), "{text}");
        assert!(
            text.contains("palisade_call_duration_seconds_bucket{le=\"0.001\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("palisade_call_duration_seconds_bucket{le=\"0.005\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("palisade_call_duration_seconds_count 3"),
            "{text}"
        );
        assert!(text.contains("palisade_principals_active 1"), "{text}");
        assert!(
            text.contains("palisade_servers{state=\"running\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("palisade_http_refusals_total{reason=\"unauthorized\"} 1"),
            "{text}"
        );
    }
}
