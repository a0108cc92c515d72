//! The gateway in-process over `tokio::io::duplex`, driven by an rmcp client, with the policy,
//! approval and audit stages injected through `GatewayOptions::stages`: proves the seams the
//! policy engine and audit log plug into, against a real downstream server.

use std::sync::{Arc, Mutex};

use palisade::gateway::{
    AuditError, AuditSink, CallInfo, CallOutcome, CallPolicy, CallRecord, Decision, Gateway,
    GatewayOptions, PolicyVerdict, Stages,
};
use rmcp::model::{CallToolRequestParams, ClientConfig, ProtocolVersion};
use rmcp::ServiceExt;
use serde_json::json;

use crate::support::*;

/// Denies `write_result`, escalates `write_raise`, allows the rest; records which tool lists
/// it was shown.
#[derive(Default, Clone)]
struct TestPolicy {
    listed: Arc<Mutex<Vec<String>>>,
}

impl CallPolicy for TestPolicy {
    fn decide(&self, call: &CallInfo<'_>) -> PolicyVerdict {
        let (decision, reason) = match call.tool {
            // The engine needs the server's roots: the session sandbox dir comes first.
            _ if !call.roots.first().is_some_and(|r| r.ends_with("sandbox")) => {
                (Decision::Deny, "no roots given to the policy")
            }
            "write_result" => (Decision::Deny, "writes are not allowed in this test"),
            "write_raise" => (Decision::Escalate, "writing needs a human"),
            _ => (Decision::Allow, "read-only"),
        };
        PolicyVerdict {
            decision,
            rule: Some("test-rule".into()),
            reason: reason.into(),
        }
    }

    fn tools_listed(&self, server: &str, tools: &[rmcp::model::Tool]) {
        let mut l = self.listed.lock().unwrap();
        l.extend(tools.iter().map(|t| format!("{server}/{}", t.name)));
    }
}

#[derive(Default, Clone)]
struct Collect(Arc<Mutex<Vec<CallRecord>>>);

impl AuditSink for Collect {
    fn record(&self, rec: &CallRecord) -> Result<(), AuditError> {
        self.0.lock().unwrap().push(rec.clone());
        Ok(())
    }
}

fn args(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    v.as_object().unwrap().clone()
}

async fn start(
    ws: &Workspace,
    audit: Arc<dyn AuditSink>,
    policy: TestPolicy,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
    tokio::task::JoinHandle<()>,
) {
    let servers =
        json!({"probe": {"command": python().display().to_string(), "args": [probe_server()]}});
    let cfg_path = ws.config(servers, json!({}));
    let config = palisade::config::load_file(&cfg_path).unwrap();
    let mut opts = GatewayOptions::new(config).unwrap();
    opts.stages = Stages {
        policy: Arc::new(policy),
        audit,
        ..Stages::default()
    };
    let gateway = Gateway::start(opts).await.unwrap();
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let served = tokio::spawn(async move {
        let (r, w) = tokio::io::split(server_io);
        gateway.serve((r, w), std::future::pending()).await.unwrap();
    });
    let (r, w) = tokio::io::split(client_io);
    let client = ClientConfig::default()
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
        .serve((r, w))
        .await
        .unwrap();
    (client, served)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_and_approval_stages_decide_and_every_call_is_audited() {
    let ws = Workspace::new();
    let records = Collect::default();
    let policy = TestPolicy::default();
    let (client, served) = start(&ws, Arc::new(records.clone()), policy.clone()).await;
    assert!(
        policy
            .listed
            .lock()
            .unwrap()
            .contains(&"probe/write_raise".to_string()),
        "the policy was shown the probe's tools before they were offered"
    );
    let target = ws.path().join("should-not-exist.txt");
    let path = target.display().to_string();

    let ok = client
        .call_tool(CallToolRequestParams::new("probe__pid"))
        .await
        .unwrap();
    assert_ne!(ok.is_error, Some(true));

    let denied = client
        .call_tool(
            CallToolRequestParams::new("probe__write_result")
                .with_arguments(args(json!({"path": path, "text": "x"}))),
        )
        .await
        .unwrap();
    assert_eq!(denied.is_error, Some(true));
    let text = &denied.content[0].as_text().unwrap().text;
    assert_eq!(
        text,
        "DENIED by policy: writes are not allowed in this test"
    );

    let escalated = client
        .call_tool(
            CallToolRequestParams::new("probe__write_raise")
                .with_arguments(args(json!({"path": path, "text": "x"}))),
        )
        .await
        .unwrap();
    let text = &escalated.content[0].as_text().unwrap().text;
    assert_eq!(
        text,
        "ESCALATION REQUIRED: writing needs a human. Denied: no approver is configured."
    );
    assert!(!target.exists(), "denied calls never reached the server");

    let recs = records.0.lock().unwrap().clone();
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[0].tool_name, "pid");
    assert_eq!(recs[0].result, CallOutcome::Success);
    assert_eq!(
        recs[0].sandboxed,
        recs[0]
            .enforcement
            .as_ref()
            .is_some_and(|e| e.is_sandboxed()),
        "the flag follows the launcher's enforcement record"
    );
    assert!(recs[0].enforcement.is_some());
    assert!(matches!(recs[1].result, CallOutcome::Denied { .. }));
    assert_eq!(recs[1].policy_decision.rule.as_deref(), Some("test-rule"));
    assert_eq!(recs[1].arguments["path"], json!(path));
    assert!(matches!(recs[2].result, CallOutcome::Denied { .. }));
    assert!(recs[2].escalation_result.is_some());

    client.cancel().await.unwrap();
    served.await.unwrap();
}

/// A client that approves every elicitation, as a person clicking "approve" would.
struct ApprovingClient;

impl rmcp::ClientHandler for ApprovingClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            rmcp::model::ClientCapabilities::builder()
                .enable_elicitation()
                .build(),
            rmcp::model::Implementation::new("approving-test-client", "1"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let text = serde_json::to_string(&request).unwrap();
        assert!(
            text.contains("write_raise"),
            "the question names the tool: {text}"
        );
        Ok(
            rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
                .with_content(json!({"approve": true})),
        )
    }
}

/// `--escalation elicit`: the real approval chain asks the agent's client through
/// `elicitation/create`; an approval lets the escalated call through to the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalation_approved_by_elicitation_reaches_the_server() {
    let ws = Workspace::new();
    let servers =
        json!({"probe": {"command": python().display().to_string(), "args": [probe_server()]}});
    let cfg_path = ws.config(servers, json!({}));
    let config = palisade::config::load_file(&cfg_path).unwrap();
    let mut opts = GatewayOptions::new(config).unwrap();
    let specs = palisade::approval::parse_escalation("elicit").unwrap();
    let elicitor = std::sync::Arc::new(palisade::gateway::stages::approval::UpstreamElicitor::new(
        opts.upstream.clone(),
    ));
    let chain =
        palisade::approval::build_chain(&specs, Some(elicitor), std::time::Duration::from_secs(30))
            .unwrap();
    let records = Collect::default();
    opts.stages = Stages {
        policy: Arc::new(TestPolicy::default()),
        approver: Arc::new(chain),
        audit: Arc::new(records.clone()),
    };
    let gateway = Gateway::start(opts).await.unwrap();
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let served = tokio::spawn(async move {
        let (r, w) = tokio::io::split(server_io);
        gateway.serve((r, w), std::future::pending()).await.unwrap();
    });
    let (r, w) = tokio::io::split(client_io);
    let client = ApprovingClient.serve((r, w)).await.unwrap();

    // The session sandbox dir: writable by the server whether or not it runs sandboxed.
    let target = ws.path().join("sandbox/approved.txt");
    let result = client
        .call_tool(
            CallToolRequestParams::new("probe__write_raise").with_arguments(args(
                json!({"path": target.display().to_string(), "text": "ok"}),
            )),
        )
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "ok");
    let recs = records.0.lock().unwrap().clone();
    assert_eq!(
        recs[0].escalation_result,
        Some(palisade::gateway::ApprovalOutcome::Approved {
            by: "elicit".into()
        })
    );
    client.cancel().await.unwrap();
    served.await.unwrap();
}
