//! The controlling terminal as the approver: asked there, never on stdout; a withdrawn
//! question and a late answer decide nothing.

use serde_json::Value;

use crate::*;

#[test]
fn tty_asks_on_the_controlling_terminal_never_on_stdout() {
    let f = Fixture::new();
    let copy = f.root.join("stdout-copy.jsonl");
    // Only an explicit yes (`y` or `yes`, any case, surrounding blanks ignored) approves;
    // `n`, a bare Enter (the default N) and anything longer are denials.
    let typed = ["y", "n", "yes please", "", " YES "];
    let r = f.drive(
        "tty",
        &["--escalation", "tty"],
        &[
            ("TTY_ANSWERS", &serde_json::to_string(&typed).unwrap()),
            ("STDOUT_COPY", copy.to_str().unwrap()),
        ],
    );
    let r = r.as_array().unwrap();
    assert_eq!(r.len(), typed.len());
    for (i, e) in r.iter().enumerate() {
        let shown = e["shown"].as_str().unwrap();
        for want in [
            "server: fs",
            "tool:   write",
            REASON,
            &f.path(&format!("tty-{i}.txt")),
            "[REDACTED:api-key]",
        ] {
            assert!(shown.contains(want), "missing {want:?} in {shown}");
        }
        assert!(
            !shown.contains(SECRET),
            "the secret shown in clear: {shown}"
        );
        assert_eq!(e["pending_while_asked"], true, "{e}");
    }
    for i in [0, 4] {
        assert_success(&r[i]["result"]);
        assert_eq!(r[i]["written"], true, "{:?}", r[i]);
    }
    for i in [1, 2, 3] {
        let t = refusal_text(&r[i]["result"]);
        assert!(
            t.starts_with(&format!(
                "ESCALATION REQUIRED: {REASON}. Denied: denied at the terminal"
            )),
            "{t}"
        );
        assert_eq!(r[i]["written"], false, "{:?}", r[i]);
    }
    // The MCP channel stayed clean: every line palisade wrote on stdout is JSON-RPC, and the
    // question never appeared there.
    let out = std::fs::read_to_string(&copy).unwrap();
    assert!(out.lines().count() >= 2 + typed.len(), "{out}");
    for line in out.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["jsonrpc"], "2.0", "{line}");
    }
    assert!(!out.contains("approval needed") && !out.contains("[y/N]"));
    let recs = f.writes();
    assert_eq!(recs.len(), typed.len());
    for (i, rec) in recs.iter().enumerate() {
        let want = if i == 0 || i == 4 {
            "approved"
        } else {
            "denied"
        };
        assert_audited(rec, want, "tty");
    }
}

/// A question withdrawn because the agent cancelled the call frees the terminal, and a late
/// `y` typed for it does not answer the next question.
#[test]
fn tty_a_withdrawn_question_and_a_late_answer_decide_nothing() {
    let f = Fixture::new();
    let copy = f.root.join("stdout-copy.jsonl");
    let r = f.drive(
        "tty_cancel",
        &["--escalation", "tty"],
        &[("STDOUT_COPY", copy.to_str().unwrap())],
    );
    assert!(
        r["withdrawn"]
            .as_str()
            .unwrap()
            .contains("question withdrawn: the call was cancelled"),
        "{r}"
    );
    assert_eq!(
        refusal_text(&r["tty-next.txt"]),
        denied("denied at the terminal (answered `n`)")
    );
    assert_success(&r["tty-last.txt"]);
    assert_eq!(r["tty-cancelled.txt:written"], false, "{r}");
    assert_eq!(r["tty-next.txt:written"], false, "{r}");
    assert_eq!(r["tty-last.txt:written"], true, "{r}");
    let recs = f.writes();
    assert_eq!(recs.len(), 3, "{recs:?}");
    assert_audited(&recs[0], "denied", "cancelled");
    assert_audited(&recs[1], "denied", "tty");
    assert_audited(&recs[2], "approved", "tty");
}
