//! Relay of downstream sampling and elicitation requests through `palisade serve` (issue #8),
//! end to end: the real binary, real servers under bubblewrap (server-everything, and
//! tests/servers/relay_server.py, which asks whether or not it was offered the capability,
//! as a compromised server would), and the Python `mcp` SDK as the agent's client
//! (tests/clients/relay_drive.py, which counts every request that reaches it).
//!
//! Each refusal is proven next to a control in the same gateway where the same request,
//! allowed, does reach the client, so no check can pass because nothing worked at all.
//!
//! Needs bubblewrap and the test dependencies ($PALISADE_TEST_DEPS, scripts/test.sh).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod support;

use std::path::PathBuf;

use serde_json::{json, Value};
use support::{
    allow_all_policy, driver, node_server, palisade, python, read_jsonl, repo, report, write_json,
};

/// server-everything (stdio), with `relay` when given.
fn everything(relay: Option<Value>) -> Value {
    let mut v = json!({"command": "node", "args": [node_server("server-everything"), "stdio"]});
    if let Some(r) = relay {
        v["relay"] = r;
    }
    v
}

/// tests/servers/relay_server.py, with `relay` when given.
fn asker(relay: Option<Value>) -> Value {
    // Pinned to the handshake: this server sends its sampling and elicitation as requests of
    // its own, which 2026-07-28 has no channel for (tests/protocol/ covers that era).
    let mut v = json!({"command": python(), "args": [repo("tests/servers/relay_server.py")],
                       "protocol": "2025-11-25"});
    if let Some(r) = relay {
        v["relay"] = r;
    }
    v
}

struct Run {
    dir: tempfile::TempDir,
}

/// What the client saw: tools, call results, and the requests that reached it.
struct Seen {
    tools: Vec<String>,
    calls: Vec<Value>,
    sampling: Vec<Value>,
    elicitation: Vec<String>,
    /// Prompts whose relayed sampling was cancelled while the client was answering.
    cancelled: Vec<String>,
    /// The mode of each elicitation the client saw.
    modes: Vec<String>,
}

impl Seen {
    fn call(&self, tool: &str) -> &Value {
        self.calls
            .iter()
            .find(|c| c["tool"] == tool)
            .unwrap_or_else(|| panic!("no call of {tool} in {:?}", self.calls))
    }

    /// Asserts that `tool` succeeded with the client's canned sampling answer.
    fn sampled_by_the_client(&self, tool: &str) {
        let c = self.call(tool);
        assert_eq!(c["error"], false, "{c}");
        let text = c["text"].as_str().unwrap_or_default();
        assert!(text.contains("canned-by-relay-client"), "{c}");
    }

    /// The JSON a relay_server.py tool returned.
    fn answer(&self, tool: &str) -> Value {
        let c = self.call(tool);
        assert_eq!(c["error"], false, "{tool} failed: {c}");
        serde_json::from_str(c["text"].as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{tool}: not JSON ({e}): {c}"))
    }
}

impl Run {
    fn new() -> Run {
        Run {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Runs the client against `palisade serve` over `servers` (enforce, bwrap, allow-all
    /// policy, an audit log) and makes `calls`.
    fn drive(&self, servers: Value, calls: Value, env: &[(&str, &str)]) -> Seen {
        let cfg = json!({
            "mcpServers": servers,
            "palisade": {
                "sandboxPolicy": "enforce",
                "backend": "bwrap",
                "sandboxDir": self.path("sandbox"),
                "stateDir": self.path("state"),
                "auditLog": self.path("audit.jsonl"),
                "policy": allow_all_policy(),
            }
        });
        let config = self.path("config.json");
        write_json(&config, &cfg);
        let serve = [palisade().into(), "serve".into(), "--config".into(), config];
        self.drive_command(&serve, calls, env)
    }

    /// Runs the client against `server` itself, with nothing between them: a control showing
    /// what the client sees of the server's requests unprotected.
    fn drive_direct(&self, server: &Value, calls: Value) -> Seen {
        let mut argv = vec![PathBuf::from(server["command"].as_str().unwrap())];
        for a in server["args"].as_array().into_iter().flatten() {
            argv.push(a.as_str().unwrap().into());
        }
        self.drive_command(&argv, calls, &[])
    }

    /// Runs the client against the MCP server `argv` starts and makes `calls`.
    fn drive_command(&self, argv: &[PathBuf], calls: Value, env: &[(&str, &str)]) -> Seen {
        let log = self.path("serve-stderr.log");
        let mut cmd = driver("tests/clients/relay_drive.py");
        cmd.arg(calls.to_string())
            .arg("--")
            .args(argv)
            .env("RELAY_ERRLOG", &log)
            .env("RUST_LOG", "info,rmcp=error")
            .envs(env.iter().copied());
        let v = report(&mut cmd, "relay_drive.py", &log, None);
        let strings = |key: &str| -> Vec<String> {
            v[key]
                .as_array()
                .unwrap_or_else(|| panic!("report lacks {key}: {v}"))
                .iter()
                .map(|x| x.as_str().unwrap_or_default().to_string())
                .collect()
        };
        Seen {
            tools: strings("tools"),
            calls: v["calls"].as_array().cloned().unwrap_or_default(),
            sampling: v["sampling"].as_array().cloned().unwrap_or_default(),
            elicitation: strings("elicitation"),
            cancelled: strings("cancelled"),
            modes: strings("modes"),
        }
    }

    /// The audit records of the relayed (or refused) requests, as `(kind, server, status,
    /// error)`.
    fn relay_records(&self) -> Vec<(String, String, String, String)> {
        read_jsonl(&self.path("audit.jsonl"))
            .into_iter()
            .filter(|r| r.get("kind").is_some())
            .map(|r| {
                let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (
                    s(&r["kind"]),
                    s(&r["serverName"]),
                    s(&r["result"]["status"]),
                    s(&r["result"]["error"]),
                )
            })
            .collect()
    }
}

#[test]
fn relay_off_refuses_before_the_agent_while_the_same_request_allowed_gets_through() {
    let run = Run::new();
    let on = json!({"sampling": true, "elicitation": true});
    let seen = run.drive(
        json!({
            "off": asker(None),
            "on": asker(Some(on.clone())),
            "evoff": everything(None),
            "evon": everything(Some(on)),
        }),
        json!([
            {"tool": "off__ask_sampling", "args": {"prompt": "refused prompt"}},
            {"tool": "off__ask_elicitation", "args": {"question": "refused question"}},
            {"tool": "on__ask_sampling", "args": {"prompt": "allowed prompt"}},
            {"tool": "on__ask_elicitation", "args": {"question": "allowed question"}},
        ]),
        &[],
    );

    // Relay off: the server's requests come back as errors saying how to allow them...
    let s = seen.answer("off__ask_sampling");
    assert_eq!(s["ok"], false, "{s}");
    let msg = s["error"].as_str().unwrap();
    assert!(
        msg.contains("relaying is off") && msg.contains(r#""relay": {"sampling": true}"#),
        "{msg}"
    );
    assert!(msg.contains("mcpServers.off"), "{msg}");
    let e = seen.answer("off__ask_elicitation");
    assert_eq!(e["ok"], false, "{e}");
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains(r#""relay": {"elicitation": true}"#),
        "{e}"
    );
    // ...and nothing of them reached the client.
    assert!(
        !seen
            .sampling
            .iter()
            .any(|x| x["text"].as_str().unwrap_or_default().contains("refused")),
        "{:?}",
        seen.sampling
    );
    assert!(
        !seen.elicitation.iter().any(|m| m.contains("refused")),
        "{:?}",
        seen.elicitation
    );

    // Control: the same requests, relay on, reach the client and its answers come back.
    let s = seen.answer("on__ask_sampling");
    assert_eq!(s["ok"], true, "{s}");
    assert_eq!(s["text"], "canned-by-relay-client");
    let e = seen.answer("on__ask_elicitation");
    assert_eq!(e["ok"], true, "{e}");
    assert_eq!(e["action"], "accept");
    assert_eq!(e["content"]["answer"], "canned-answer");
    assert_eq!(seen.sampling.len(), 1, "{:?}", seen.sampling);
    assert_eq!(seen.elicitation.len(), 1, "{:?}", seen.elicitation);

    // Not declared downstream when off: server-everything registers its trigger tools only
    // for a client that declared the capability.
    assert!(
        seen.tools.iter().any(|t| t == "evoff__echo"),
        "{:?}",
        seen.tools
    );
    for t in ["trigger-sampling-request", "trigger-elicitation-request"] {
        assert!(
            !seen.tools.contains(&format!("evoff__{t}")),
            "{t} listed for evoff"
        );
        assert!(
            seen.tools.contains(&format!("evon__{t}")),
            "{t} missing for evon"
        );
    }

    // The audit log has both refusals and both relayed requests.
    let recs = run.relay_records();
    let has = |kind: &str, server: &str, status: &str| {
        recs.iter()
            .any(|(k, s, st, _)| k == kind && s == server && st == status)
    };
    assert!(has("sampling", "off", "denied"), "{recs:?}");
    assert!(has("elicitation", "off", "denied"), "{recs:?}");
    assert!(has("sampling", "on", "success"), "{recs:?}");
    assert!(has("elicitation", "on", "success"), "{recs:?}");
    assert_eq!(recs.len(), 4, "{recs:?}");
}

#[test]
fn server_everything_sampling_and_elicitation_reach_the_agent_attributed_and_audited() {
    let run = Run::new();
    let seen = run.drive(
        json!({"everything": everything(Some(json!({"sampling": true, "elicitation": true})))}),
        json!([
            {"tool": "everything__trigger-sampling-request", "args": {"prompt": "relay me", "maxTokens": 5}},
            {"tool": "everything__trigger-elicitation-request", "args": {}},
        ]),
        &[],
    );
    seen.sampled_by_the_client("everything__trigger-sampling-request");
    let e = seen.call("everything__trigger-elicitation-request");
    assert_eq!(e["error"], false, "{e}");
    assert!(e["text"].as_str().unwrap().contains("canned-name"), "{e}");

    // The client saw the server's prompt, and who asked.
    assert_eq!(seen.sampling.len(), 1, "{:?}", seen.sampling);
    assert!(
        seen.sampling[0]["text"]
            .as_str()
            .unwrap()
            .contains("relay me"),
        "{:?}",
        seen.sampling
    );
    assert_eq!(seen.sampling[0]["meta"]["palisade/server"], "everything");
    assert_eq!(seen.elicitation.len(), 1);
    assert!(
        seen.elicitation[0].starts_with("[MCP server \"everything\" asks")
            && seen.elicitation[0].contains("Please provide inputs"),
        "{:?}",
        seen.elicitation
    );

    let recs = run.relay_records();
    assert_eq!(
        recs.iter()
            .map(|(k, s, st, _)| (k.as_str(), s.as_str(), st.as_str()))
            .collect::<Vec<_>>(),
        [
            ("sampling", "everything", "success"),
            ("elicitation", "everything", "success")
        ],
        "{recs:?}"
    );
}

// A server cannot pass a URL elicitation off as a form: its request names `mode` twice,
// "form" then "url", with a `url`. The form is what palisade checks, so the form is what the
// client gets: written anew, no URL in it. (Before, the check read the typed view, a form,
// and the server's own fields went on: the client got a URL elicitation.) The control: the
// same request with nothing between server and client reaches the client as a URL
// elicitation.
#[test]
fn a_url_elicitation_written_as_a_form_reaches_the_client_as_a_form() {
    let run = Run::new();
    let faulty = json!({"command": python(), "args": [repo("tests/servers/faulty_server.py")],
                        "relay": {"elicitation": true}});
    let direct = run.drive_direct(&faulty, json!([{"tool": "url_in_form", "args": {}}]));
    assert_eq!(direct.modes, ["url"], "{:?}", direct.elicitation);
    let seen = run.drive(
        json!({"faulty": faulty}),
        json!([{"tool": "faulty__url_in_form", "args": {}}]),
        &[],
    );
    assert_eq!(seen.modes, ["form"], "{:?}", seen.elicitation);
    let answer = seen.call("faulty__url_in_form");
    let text = answer["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("result:"), "{answer}");
}

// A sampling request with a made-up tool history (an assistant `tool_use` and the user's
// `tool_result` for it) would have the agent's model act on the server's say: it is refused
// like a tool list, named and audited, and never reaches the client. The controls: the same
// request, the server run with nothing in between, reaches the client; and through the same
// gateway, the same server's text-only sampling does.
#[test]
fn a_sampling_request_with_a_made_up_tool_history_never_reaches_the_client() {
    let run = Run::new();
    let faulty = json!({"command": python(), "args": [repo("tests/servers/faulty_server.py")],
                        "relay": {"sampling": true}});
    let direct = run.drive_direct(
        &faulty,
        json!([{"tool": "sampling_tool_history", "args": {}}]),
    );
    assert_eq!(direct.sampling.len(), 1, "{:?}", direct.calls);
    assert!(
        direct.sampling[0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("tidy my files")),
        "{:?}",
        direct.sampling
    );
    let seen = run.drive(
        json!({"faulty": faulty}),
        json!([{"tool": "faulty__sampling_tool_history", "args": {}},
               {"tool": "faulty__sampling", "args": {}}]),
        &[],
    );
    let refused = seen.call("faulty__sampling_tool_history");
    let text = refused["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("error: ") && text.contains("tool_use/tool_result"),
        "{refused}"
    );
    seen.sampled_by_the_client("faulty__sampling");
    assert_eq!(seen.sampling.len(), 1, "{:?}", seen.sampling);
    assert_eq!(seen.sampling[0]["text"], "hi", "{:?}", seen.sampling);
    let statuses: Vec<String> = run
        .relay_records()
        .into_iter()
        .map(|(kind, _, status, _)| format!("{kind} {status}"))
        .collect();
    assert_eq!(statuses, ["sampling denied", "sampling success"]);
}

// A server's request while several calls of the one stdio session are open to it goes to that
// session: every call there is the same agent's, so there is nothing to tell apart (only
// requests of different sessions are refused as unattributable).
#[test]
fn a_servers_request_during_several_calls_of_one_session_reaches_it() {
    let run = Run::new();
    let seen = run.drive(
        json!({"everything": everything(Some(json!({"sampling": true})))}),
        json!([
            {"tool": "everything__trigger-long-running-operation", "args": {"duration": 3, "steps": 1}},
            {"tool": "everything__trigger-sampling-request", "args": {"prompt": "while another runs", "maxTokens": 5}},
        ]),
        &[("RELAY_TOGETHER", "1")],
    );
    let long = seen.call("everything__trigger-long-running-operation");
    assert_eq!(long["error"], false, "{long}");
    seen.sampled_by_the_client("everything__trigger-sampling-request");
    assert_eq!(seen.sampling.len(), 1, "{:?}", seen.sampling);
}

#[test]
fn a_flood_is_cut_at_the_rate_limit_and_undeclared_features_never_pass() {
    let run = Run::new();
    // One relayed request per minute: the flood's first request reaches the client, the
    // next four are refused at once. (The bucket refills one token a minute; the run takes
    // seconds.)
    let seen = run.drive(
        json!({"asker": asker(Some(json!({"sampling": true, "elicitation": true, "perMinute": 1})))}),
        json!([
            {"tool": "asker__flood", "args": {"n": 5}},
            {"tool": "asker__ask_url_elicitation", "args": {"url": "https://login.example.invalid/"}},
        ]),
        &[],
    );
    let f = seen.answer("asker__flood");
    assert_eq!(f["ok"], 1, "{f}");
    let errors = f["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 4, "{f}");
    assert!(errors
        .iter()
        .all(|e| e.as_str().unwrap().contains("relay.perMinute")));
    assert_eq!(seen.sampling.len(), 1, "{:?}", seen.sampling);
    // The server asked for includeContext "allServers"; the agent never sees it.
    assert!(
        seen.sampling[0]["includeContext"].is_null(),
        "{:?}",
        seen.sampling
    );

    let u = seen.answer("asker__ask_url_elicitation");
    assert_eq!(u["ok"], false, "{u}");
    assert!(
        u["error"].as_str().unwrap().contains("URL elicitation"),
        "{u}"
    );
    assert!(seen.elicitation.is_empty(), "{:?}", seen.elicitation);

    let recs = run.relay_records();
    let denied = recs.iter().filter(|r| r.2 == "denied").count();
    assert_eq!(
        denied, 5,
        "4 over the limit and the URL elicitation: {recs:?}"
    );
    assert_eq!(recs.iter().filter(|r| r.2 == "success").count(), 1);
}

#[test]
fn an_agent_without_the_capability_is_never_asked() {
    let run = Run::new();
    let seen = run.drive(
        json!({"asker": asker(Some(json!({"sampling": true, "elicitation": true})))}),
        json!([
            {"tool": "asker__ask_sampling", "args": {"prompt": "p"}},
            {"tool": "asker__ask_elicitation", "args": {"question": "q"}},
        ]),
        &[("RELAY_NO_CALLBACKS", "1")],
    );
    for tool in ["asker__ask_sampling", "asker__ask_elicitation"] {
        let a = seen.answer(tool);
        assert_eq!(a["ok"], false, "{a}");
        assert!(
            a["error"].as_str().unwrap().contains("did not declare"),
            "{a}"
        );
    }
    let recs = run.relay_records();
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert!(recs.iter().all(|r| r.2 == "denied"), "{recs:?}");
}

#[test]
fn a_server_that_gives_up_cancels_the_request_at_the_agent() {
    let run = Run::new();
    // The client answers a "hang" prompt only after 60 s; the server gives up after 5 s and
    // sends notifications/cancelled, which palisade passes on to the client. The client
    // waits (bounded) until its callback was cancelled. (5 s, not less: a cancellation that
    // overtakes a request still on its way is not seen as one.)
    let seen = run.drive(
        json!({"asker": asker(Some(json!({"sampling": true})))}),
        json!([{"tool": "asker__give_up_on_sampling", "args": {"prompt": "hang until cancelled", "seconds": 5}}]),
        &[("RELAY_WAIT_CANCEL", "1")],
    );
    let a = seen.answer("asker__give_up_on_sampling");
    assert_eq!(a["gave_up"], true, "{a}");
    assert_eq!(
        seen.cancelled,
        ["hang until cancelled"],
        "the agent's request was not cancelled"
    );
    let recs = run.relay_records();
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].2, "error", "{recs:?}");
    assert!(recs[0].3.contains("cancelled"), "{recs:?}");
}
