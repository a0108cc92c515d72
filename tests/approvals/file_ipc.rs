//! File IPC: private, atomically written request files answered approved, denied or
//! malformed; a timeout and a response for an unknown id; `palisade approve` from a second
//! terminal; a cancelled call withdrawing its question.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::*;

/// Watches a directory with inotify on a thread until stopped; returns (file name, event) in
/// order, to prove the request files appear only by rename (never half-written).
struct DirWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(String, &'static str)>>,
}

impl DirWatch {
    fn start(dir: &Path) -> DirWatch {
        use nix::sys::inotify::{AddWatchFlags as F, InitFlags, Inotify};
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK).unwrap();
        inotify
            .add_watch(
                dir,
                F::IN_CREATE
                    | F::IN_MODIFY
                    | F::IN_CLOSE_WRITE
                    | F::IN_MOVED_FROM
                    | F::IN_MOVED_TO
                    | F::IN_DELETE,
            )
            .unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            loop {
                let last = stopping.load(std::sync::atomic::Ordering::SeqCst);
                while let Ok(events) = inotify.read_events() {
                    for e in events {
                        let name = e
                            .name
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        let kind = [
                            (F::IN_CREATE, "create"),
                            (F::IN_MODIFY, "modify"),
                            (F::IN_CLOSE_WRITE, "close_write"),
                            (F::IN_MOVED_FROM, "moved_from"),
                            (F::IN_MOVED_TO, "moved_to"),
                            (F::IN_DELETE, "delete"),
                        ]
                        .into_iter()
                        .find(|(m, _)| e.mask.contains(*m))
                        .map_or("other", |(_, k)| k);
                        seen.push((name, kind));
                    }
                }
                if last {
                    return seen;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        DirWatch { stop, thread }
    }

    fn finish(self) -> Vec<(String, &'static str)> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

#[test]
fn file_ipc_approved_denied_malformed_with_private_atomic_request_files() {
    let f = Fixture::new();
    let watch = DirWatch::start(&f.esc);
    let r = f.drive_dir("dir_ipc", &[]);
    let events = watch.finish();

    for label in ["approved", "denied", "malformed_decision", "not_json"] {
        let e = &r[label];
        let req = &e["request"];
        // IronCurtain's request file: exactly these fields, plus the optional offer of
        // "approve and remember" (a field IronCurtain's tools ignore).
        let mut keys: Vec<&str> = req
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .filter(|k| *k != "rememberScope")
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "arguments",
                "context",
                "escalationId",
                "reason",
                "serverName",
                "toolName"
            ],
            "{e}"
        );
        let id = req["escalationId"].as_str().unwrap();
        assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
        assert_eq!(e["request_file"], format!("request-{id}.json"));
        assert_eq!(req["serverName"], "fs");
        assert_eq!(req["toolName"], "write");
        assert_eq!(req["reason"], REASON);
        assert_eq!(req["context"]["rule"], "escalate-writes-in-work", "{e}");
        assert_eq!(req["arguments"]["path"], f.path(&format!("{label}.txt")));
        // Arguments on disk are redacted like the audit log.
        assert_eq!(req["arguments"]["content"], "[REDACTED:api-key]", "{e}");
        assert_eq!(e["mode"], 0o600, "request files are private: {e}");
        assert_eq!(e["pending_while_unanswered"], true, "{e}");
        // Both files are gone once the call has its answer.
        assert_eq!(e["listing_after"], json!([]), "{e}");
    }
    assert_success(&r["approved"]["result"]);
    assert_eq!(r["approved"]["written"], true, "{r}");
    assert_eq!(
        std::fs::read_to_string(f.work.join("approved.txt")).unwrap(),
        SECRET,
        "the server got the real arguments, only the request file was redacted"
    );
    assert_eq!(
        refusal_text(&r["denied"]["result"]),
        denied("denied by a human (file IPC)")
    );
    let t = refusal_text(&r["malformed_decision"]["result"]);
    assert!(
        t.starts_with(&format!(
            "ESCALATION REQUIRED: {REASON}. Denied: malformed response: decision `yes please`"
        )),
        "{t}"
    );
    let t = refusal_text(&r["not_json"]["result"]);
    assert!(
        t.starts_with(&format!(
            "ESCALATION REQUIRED: {REASON}. Denied: malformed response:"
        )),
        "{t}"
    );
    for label in ["denied", "malformed_decision", "not_json"] {
        assert_eq!(
            r[label]["written"], false,
            "{label} reached the server: {r}"
        );
    }

    // Atomic: each request file only ever appeared by rename from a temporary file.
    let requests: Vec<&(String, &str)> = events
        .iter()
        .filter(|(n, _)| n.starts_with("request-"))
        .collect();
    assert_eq!(requests.len(), 8, "{events:?}");
    for label in ["approved", "denied", "malformed_decision", "not_json"] {
        let name = r[label]["request_file"].as_str().unwrap();
        let kinds: Vec<&str> = events
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, k)| *k)
            .collect();
        assert_eq!(kinds, ["moved_to", "delete"], "{name}: {events:?}");
    }
    let tmp_created = events
        .iter()
        .filter(|(n, k)| n.starts_with(".tmp-") && *k == "create")
        .count();
    assert_eq!(tmp_created, 4, "{events:?}");

    let recs = f.writes();
    assert_eq!(recs.len(), 4, "{recs:?}");
    assert_audited(&recs[0], "approved", "dir");
    for rec in &recs[1..] {
        assert_audited(rec, "denied", "dir");
    }
    assert_eq!(
        recs[1]["result"]["error"],
        denied("denied by a human (file IPC)")
    );
}

#[test]
fn file_ipc_timeout_and_a_response_for_an_unknown_id() {
    let f = Fixture::new();
    let r = f.drive_dir("timeout", &["--escalation-timeout", "5"]);
    let real = r["real_id"].as_str().unwrap();
    let unknown = r["unknown_id"].as_str().unwrap();
    let mut both = vec![
        format!("request-{real}.json"),
        format!("response-{unknown}.json"),
    ];
    both.sort();
    assert_eq!(r["listing_with_unknown"], json!(both), "{r}");
    // The unknown id's approval did not approve the real request: it timed out, denied.
    let t = refusal_text(&r["result"]);
    assert!(
        t.starts_with(&format!("ESCALATION REQUIRED: {REASON}. Denied: "))
            && t.contains("within 5 s"),
        "{t}"
    );
    assert_eq!(r["written"], false, "{r}");
    // The real request is gone; the stray response is not ours to delete.
    assert_eq!(
        r["listing_after"],
        json!([format!("response-{unknown}.json")]),
        "{r}"
    );
    let recs = f.writes();
    assert_eq!(recs.len(), 1);
    assert_audited(&recs[0], "denied", "dir");
    assert!(
        recs[0]["result"]["error"]
            .as_str()
            .unwrap()
            .contains("within 5 s"),
        "{}",
        recs[0]
    );
}

#[test]
fn palisade_approve_answers_from_a_second_terminal() {
    let f = Fixture::new();
    let r = f.drive_dir("approve_cmd", &[]);
    let stdout = |k: &str| {
        assert_eq!(r[k]["code"], 0, "{k}: {r}");
        r[k]["stdout"].as_str().unwrap().to_string()
    };
    assert!(stdout("empty").contains("no pending requests"), "{r}");
    let listed = stdout("listed");
    let id_a = r["ids"][0].as_str().unwrap();
    for want in [
        id_a,
        "server: fs",
        "tool:   write",
        REASON,
        "[REDACTED:api-key]",
        &f.path("by-approve-all.txt"),
    ] {
        assert!(listed.contains(want), "missing {want:?} in {listed}");
    }
    assert!(!listed.contains(SECRET), "{listed}");
    assert_eq!(
        r["a_pending_after_list"], true,
        "--list answers nothing: {r}"
    );
    assert!(stdout("all").contains("-> approved"), "{r}");
    assert!(stdout("deny_all").contains("-> denied"), "{r}");
    assert_success(&r["a"]);
    assert_eq!(r["a_written"], true, "{r}");
    assert_eq!(
        refusal_text(&r["b"]),
        denied("denied by a human (file IPC)")
    );
    assert_eq!(r["b_written"], false, "{r}");
    assert_eq!(r["listing_after"], json!([]), "{r}");
    let recs = f.writes();
    assert_eq!(recs.len(), 2);
    assert_audited(&recs[0], "approved", "dir");
    assert_audited(&recs[1], "denied", "dir");
}

/// The agent cancels an escalated call while the question is pending: the question is
/// withdrawn at once (not left for the 300 s timeout), and a late approval lets nothing through.
#[test]
fn a_cancelled_call_withdraws_its_question() {
    let f = Fixture::new();
    let r = f.drive_dir("cancel", &["--escalation-timeout", "300"]);
    assert_eq!(r["pending_before_cancel"], true, "{r}");
    assert_eq!(r["request_withdrawn"], true, "{r}");
    assert_eq!(r["listing_after"], json!([]), "{r}");
    assert_eq!(r["after"]["text"], "still serving", "{r}");
    assert_eq!(r["written"], false, "{r}");
    let recs = f.writes();
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_audited(&recs[0], "denied", "cancelled");
    assert!(
        recs[0]["result"]["error"]
            .as_str()
            .unwrap()
            .contains("the agent cancelled the call"),
        "{}",
        recs[0]
    );
}
