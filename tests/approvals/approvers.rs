//! The approvers that need no second human channel: `deny` (what the agent is told, who
//! decided), `elicit` through the agent's MCP client, `auto` choosing elicitation or denying
//! with its reason, and `exec` approving or handing the question on.

use std::os::unix::fs::PermissionsExt;

use serde_json::{json, Value};

use crate::*;

#[test]
fn deny_tells_the_agent_what_to_do_and_audits_who_decided() {
    let f = Fixture::new();
    // Explicit `deny`, then the default (no --escalation at all): the same for the agent.
    for args in [&["--escalation", "deny"][..], &[][..]] {
        let r = f.drive("plain", args, &[]);
        let text = refusal_text(&r["write"]);
        assert_eq!(text, denied("no approver is configured"), "{r}");
        assert_eq!(r["written"], false, "nothing reached the server: {r}");
        // An allowed call is untouched by it.
        assert_eq!(r["read"]["text"], "hello", "{r}");
    }
    let recs = f.writes();
    assert_eq!(recs.len(), 2, "{recs:?}");
    for rec in &recs {
        assert_audited(rec, "denied", "deny");
        assert_eq!(rec["result"]["error"], denied("no approver is configured"));
    }
    let reads: Vec<Value> = f
        .records()
        .into_iter()
        .filter(|r| r["toolName"] == "read")
        .collect();
    assert_eq!(reads.len(), 2);
    for r in &reads {
        assert!(r.get("escalationResult").is_none(), "{r}");
        assert!(r.get("escalationDecidedBy").is_none(), "{r}");
    }
}

#[test]
fn elicit_accept_decline_cancel_and_error() {
    let f = Fixture::new();
    let answers = ["accept_yes", "accept_no", "decline", "cancel", "error"];
    let r = f.drive(
        "elicit",
        &["--escalation", "elicit"],
        &[("ELICIT_ANSWERS", &answers.join(","))],
    );
    let r = r.as_array().unwrap();
    assert_eq!(r.len(), answers.len());
    for e in r {
        let asked = e["asked"].as_array().unwrap();
        assert_eq!(asked.len(), 1, "one question per escalation: {e}");
        let msg = asked[0]["message"].as_str().unwrap();
        for want in ["`write`", "`fs`", REASON, "[REDACTED:api-key]"] {
            assert!(msg.contains(want), "missing {want:?} in {msg}");
        }
        assert!(!msg.contains(SECRET), "{msg}");
        let schema = &asked[0]["schema"];
        assert_eq!(schema["properties"]["approve"]["type"], "boolean", "{e}");
        assert_eq!(schema["required"], json!(["approve"]), "{e}");
    }
    assert_success(&r[0]["result"]);
    assert_eq!(r[0]["written"], true);
    let details = [
        "the user did not approve",
        "the user declined",
        "the user cancelled",
        "elicitation failed",
    ];
    for (e, detail) in r[1..].iter().zip(details) {
        let t = refusal_text(&e["result"]);
        assert!(
            t.starts_with(&format!("ESCALATION REQUIRED: {REASON}. Denied: {detail}")),
            "{t}"
        );
        assert_eq!(e["written"], false, "{e}");
    }
    let recs = f.writes();
    assert_eq!(recs.len(), answers.len());
    assert_audited(&recs[0], "approved", "elicit");
    for rec in &recs[1..] {
        assert_audited(rec, "denied", "elicit");
    }
}

#[test]
fn auto_uses_elicitation_when_the_client_declares_it() {
    let f = Fixture::new();
    let r = f.drive(
        "elicit",
        &["--escalation", "auto"],
        &[("ELICIT_ANSWERS", "accept_yes")],
    );
    assert_eq!(r[0]["asked"].as_array().unwrap().len(), 1, "{r}");
    assert_success(&r[0]["result"]);
    assert_eq!(r[0]["written"], true);
    let recs = f.writes();
    assert_eq!(recs.len(), 1);
    assert_audited(&recs[0], "approved", "elicit");
}

/// The Python SDK starts palisade in a new session (no controlling terminal), and this client
/// declares no elicitation: `auto` has nobody to ask.
#[test]
fn auto_without_elicitation_or_terminal_denies_and_says_why() {
    let f = Fixture::new();
    let r = f.drive("plain", &["--escalation", "auto"], &[]);
    let t = refusal_text(&r["write"]);
    assert!(
        t.starts_with(&format!(
            "ESCALATION REQUIRED: {REASON}. Denied: no approver decided ("
        )),
        "{t}"
    );
    for why in [
        "elicit: the client did not declare elicitation",
        "tty: no terminal",
    ] {
        assert!(t.contains(why), "missing {why:?} in {t}");
    }
    assert_eq!(r["written"], false);
    assert_eq!(r["read"]["text"], "hello", "{r}");
    let recs = f.writes();
    assert_eq!(recs.len(), 1);
    assert_audited(&recs[0], "denied", "deny");
    assert_eq!(recs[0]["result"]["error"], t.as_str(), "the audit says why");
}

#[test]
fn exec_approves_or_hands_the_question_to_the_dir_approver() {
    let f = Fixture::new();
    // The program approves what it recognises and escalates the rest; it keeps what it was
    // given so the test can check it saw the request as JSON.
    let seen = f.root.join("seen");
    std::fs::create_dir(&seen).unwrap();
    let program = f.root.join("approver.sh");
    std::fs::write(
        &program,
        "#!/bin/sh\nin=\"$1/request-$$.json\"\ncat > \"$in\"\n\
         if grep -q approve-me \"$in\"; then echo approve; else echo escalate; fi\n",
    )
    .unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let chain = format!(
        "exec:{} {},dir:{}",
        program.display(),
        seen.display(),
        f.esc.display()
    );
    let r = f.drive("exec_chain", &["--escalation", &chain], &[]);
    assert_success(&r["by_program"]);
    assert_eq!(r["by-program_written"], true, "{r}");
    assert_success(&r["human_approves"]["result"]);
    assert_eq!(r["human_approves_written"], true, "{r}");
    assert_eq!(
        refusal_text(&r["human_denies"]["result"]),
        denied("denied by a human (file IPC)")
    );
    assert_eq!(r["human_denies_written"], false, "{r}");
    // The program saw every escalation, as IronCurtain-shaped JSON.
    let given: Vec<Value> = std::fs::read_dir(&seen)
        .unwrap()
        .map(|e| serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap())
        .collect();
    assert_eq!(given.len(), 3, "{given:?}");
    for g in &given {
        assert_eq!(g["serverName"], "fs");
        assert_eq!(g["toolName"], "write");
        assert_eq!(g["reason"], REASON);
    }
    let recs = f.writes();
    assert_eq!(recs.len(), 3);
    assert_audited(&recs[0], "approved", "exec");
    assert_audited(&recs[1], "approved", "dir");
    assert_audited(&recs[2], "denied", "dir");
}
