//! What no approver may do: delay an allowed call behind a slow escalation, start with
//! escalation settings out of range, have its prompt repainted by terminal escapes in an
//! agent-chosen path, or grant an ancestor of the approved directory.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::support::{palisade, write_policy};
use crate::*;

/// Also the config-file route: `"palisade": {"escalation": "dir:PATH"}` instead of the flag.
#[test]
fn a_slow_escalation_does_not_delay_an_allowed_call() {
    let f = Fixture::new();
    f.configure(json!({"escalation": format!("dir:{}", f.esc.display())}));
    let r = f.drive("ordering", &[], &[]);
    // B (allowed) answered while A (escalated) was still waiting for a person.
    assert_eq!(r["b"]["text"], "hello", "{r}");
    assert_eq!(
        r["at_b_done"],
        json!({"a_done": false, "a_request_exists": true, "a_answered": false}),
        "{r}"
    );
    // C, escalated after A and approved first, completed while A still waited.
    assert_success(&r["c"]);
    assert_eq!(
        r["at_c_done"],
        json!({"a_done": false, "a_request_exists": true}),
        "{r}"
    );
    assert_success(&r["a"]);
    assert_eq!(
        r["events"],
        json!([
            "a:requested",
            "b:done",
            "c:requested",
            "c:done",
            "a:answered",
            "a:done"
        ])
    );
    assert_eq!(
        (&r["a_written"], &r["c_written"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(r["listing_after"], json!([]), "{r}");
    // The audit log agrees on the order of completion: B, then C, then A.
    let order: Vec<String> = f
        .records()
        .iter()
        .map(|rec| {
            let p = rec["arguments"]["path"].as_str().unwrap_or_default();
            Path::new(p)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(order, ["hello.txt", "c.txt", "a.txt"], "{order:?}");
    let recs = f.writes();
    assert_audited(&recs[0], "approved", "dir");
    assert_audited(&recs[1], "approved", "dir");
}

/// `--escalation-timeout` outside 5-3600 s is refused at start, naming the range; so is an
/// approver nobody knows.
#[test]
fn escalation_settings_out_of_range_are_refused_at_start() {
    let f = Fixture::new();
    for (args, want) in [
        (
            &["--escalation", "tty", "--escalation-timeout", "4"][..],
            "5-3600",
        ),
        (
            &["--escalation", "tty", "--escalation-timeout", "3601"][..],
            "5-3600",
        ),
        (&["--escalation", "yolo"][..], "unknown approver `yolo`"),
    ] {
        let out = Command::new(palisade())
            .args(["serve", "--config"])
            .arg(&f.config)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(
            out.stdout.is_empty(),
            "nothing on the MCP channel: {args:?}"
        );
    }
}

/// Issue 23, finding 3 (regression: the prompt printed the path raw). A file name the agent
/// chose carries `ESC[2A ESC[2K` (cursor up two lines, erase), the one-byte C1 CSI and a
/// right-to-left override. The control: the request the gateway wrote holds those characters
/// unchanged, so they did reach the question; the attack: neither the terminal prompt nor
/// `palisade approve` shows any of them raw, only as visible escapes.
#[test]
fn terminal_escapes_in_an_agent_chosen_path_cannot_repaint_the_prompt() {
    let raw = ['\u{1b}', '\u{9b}', '\u{202e}'];
    let assert_inert = |shown: &str| {
        for c in raw {
            assert!(
                !shown.contains(c),
                "{c:?} reached the terminal raw: {shown:?}"
            );
        }
        // The arguments are JSON, whose own escape (`\u001b`) covers C0; the rest shows as
        // `\u{…}`. Either way the person sees every character of the name.
        assert!(
            shown.contains("evil\\u001b[2A\\u001b[2K\\u{9b}1A\\u{202e}txt.exe"),
            "the name is not shown escaped: {shown:?}"
        );
    };
    let f = Fixture::new();
    let r = f.drive_dir("hostile_dir", &[]);
    let path = r["request"]["arguments"]["path"].as_str().unwrap();
    assert!(raw.iter().all(|c| path.contains(*c)), "control: {path:?}");
    for k in ["listed", "asked"] {
        assert_eq!(r[k]["code"], 0, "{k}: {r}");
        assert_inert(r[k]["stdout"].as_str().unwrap());
    }
    assert!(r["asked"]["stdout"].as_str().unwrap().contains("-> denied"));
    assert!(
        refusal_text(&r["result"]).contains("denied by a human"),
        "{r}"
    );

    let f = Fixture::new();
    let copy = f.root.join("stdout-copy.jsonl");
    let r = f.drive(
        "hostile_tty",
        &["--escalation", "tty"],
        &[("STDOUT_COPY", copy.to_str().unwrap())],
    );
    assert_inert(r["shown"].as_str().unwrap());
    assert!(
        refusal_text(&r["result"]).contains("denied at the terminal"),
        "{r}"
    );
}

/// Issue 23, finding 4 (regression: approving a write to `~/.config/notes-app/today.md`,
/// whose directory did not exist yet, mounted all of `~/.config` read-write for the rest of
/// the session). HOME holds `.config`, and every write escalates. The approval adds
/// exactly `~/.config/notes-app` (created), shown to the person in the request; a write
/// directly in `~/.config` and one to a user service are refused without asking anyone,
/// even though the person in this test approves whatever is put to them. The control is the
/// first call: the same person's approval does let an ordinary note through.
#[test]
fn an_approval_grants_exactly_the_approved_directory_never_an_ancestor() {
    let f = Fixture::new();
    escalate_every_write(&f);
    let home = f.root.join("home");
    std::fs::create_dir_all(home.join(".config")).unwrap();
    let r = f.drive(
        "widen_exact",
        &["--escalation", &format!("dir:{}", f.esc.display())],
        &[("HOME", home.to_str().unwrap())],
    );
    let notes = home.join(".config/notes-app");
    let recs = f.writes();
    assert_eq!(
        recs[0]["approvedRoots"],
        json!([{"path": notes, "access": "rw"}]),
        "{}",
        recs[0]
    );
    for k in ["config", "service"] {
        assert_eq!(r[k]["request"], Value::Null, "{k} was put to a person: {r}");
        assert_eq!(r[k]["written"], false, "{k}: {r}");
        let t = refusal_text(&r[k]["result"]);
        assert!(
            t.contains("Denied: not asked: an approval would grant") && t.contains("persistence"),
            "{k}: {t}"
        );
    }
    assert_success(&r["note"]["result"]);
    assert_eq!(r["note"]["written"], true, "{r}");
    assert_eq!(
        r["note"]["request"]["grants"],
        json!([{"path": notes, "access": "rw"}]),
        "the person is shown the exact grant: {r}"
    );
    assert!(!home.join(".config/systemd").exists());
    assert_eq!(recs.len(), 3, "{recs:?}");
    for rec in &recs[1..] {
        assert_eq!(rec["escalationResult"], "denied", "{rec}");
        assert_eq!(rec["escalationDecidedBy"], "deny", "{rec}");
        assert!(rec["approvedRoots"].is_null(), "{rec}");
    }
}

/// Review of stop 43 (critical): the directories an approval grants are the ones the person
/// was shown, however the call's paths resolve once they have answered. Every write
/// escalates; two writes go through symlinks in WORK, which the server can write. Control:
/// `shown-link` points outside the roots from the start, the person is shown that directory,
/// approves, and the file is written there. Attack: `swapped-link` points inside WORK when
/// the person is asked (shown WORK/sub) and is repointed at a victim directory before they
/// approve: nothing is granted and nothing written. Before, the widening resolved the paths
/// again and mounted the victim read-write.
#[test]
fn an_approval_grants_what_was_shown_not_where_a_symlink_points_after() {
    let f = Fixture::new();
    escalate_every_write(&f);
    let (shown, inside, victim) = (
        f.root.join("shown"),
        f.work.join("sub"),
        f.root.join("victim"),
    );
    for d in [&shown, &inside, &victim] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::os::unix::fs::symlink(&shown, f.work.join("shown-link")).unwrap();
    std::os::unix::fs::symlink(&inside, f.work.join("swapped-link")).unwrap();
    let r = f.drive(
        "swap_while_asked",
        &["--escalation", &format!("dir:{}", f.esc.display())],
        &[("SWAP_TO", victim.to_str().unwrap())],
    );
    let err = f.stderr_text();
    assert_eq!(
        r["shown"]["request"]["grants"],
        json!([{"path": shown, "access": "rw"}]),
        "{r}"
    );
    assert_success(&r["shown"]["result"]);
    assert!(
        shown.join("f").exists(),
        "the control was not written: {r}\n{err}"
    );
    assert_eq!(
        r["swapped"]["request"]["grants"],
        json!([{"path": inside, "access": "rw"}]),
        "{r}"
    );
    let refused = r["swapped"]["result"].to_string();
    assert!(
        refused.contains("which was not what was approved"),
        "{r}\n{err}"
    );
    assert!(
        !victim.join("f").exists(),
        "the victim was written: {r}\n{err}"
    );
    assert!(!inside.join("f").exists(), "{r}");
    let recs = f.writes();
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!(
        recs[0]["approvedRoots"],
        json!([{"path": shown, "access": "rw"}])
    );
    assert!(recs[1]["approvedRoots"].is_null(), "{}", recs[1]);
    assert_ne!(recs[1]["result"]["status"], "success", "{}", recs[1]);
}

/// A policy under which writes anywhere escalate (a rule without a directory: no root of its
/// own), so an approval has to widen the server; reads in WORK and everything else pass.
fn escalate_every_write(f: &Fixture) {
    write_policy(
        &f.root.join("compiled-policy.json"),
        json!([
            {"name": "allow-reads-in-work", "description": "reads in WORK", "principle": "test",
             "if": {"roles": ["read-path"], "paths": {"roles": ["read-path"], "within": f.work}},
             "then": "allow", "reason": "reading the work directory is fine"},
            {"name": "escalate-writes", "description": "every write", "principle": "test",
             "if": {"roles": ["write-path", "delete-path"]},
             "then": "escalate", "reason": REASON},
            {"name": "allow-the-rest", "description": "everything else", "principle": "test",
             "if": {}, "then": "allow", "reason": "reads are not what this test is about"}
        ]),
    );
}
