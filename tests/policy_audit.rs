//! The audit log: redaction on disk, chaining across reopen, tamper detection through the
//! real `palisade audit verify`, and writes that fail closed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::path::Path;
use std::process::Command;

use palisade::audit::{
    AuditLog, AuditOptions, AuditRecord, CallResult, PolicyDecisionRecord, Redaction, ResultStatus,
};
use palisade::policy::Status;
use serde_json::json;

fn record(i: u32, args: serde_json::Value) -> AuditRecord {
    AuditRecord {
        timestamp: palisade::audit::now_rfc3339(),
        request_id: format!("req-{i}"),
        server_name: "filesystem".into(),
        tool_name: "read_file".into(),
        arguments: args,
        policy_decision: PolicyDecisionRecord {
            status: Status::Allow,
            rule: "allow-read-downloads".into(),
            reason: "r".into(),
        },
        escalation_result: None,
        escalation_decided_by: None,
        result: CallResult {
            status: ResultStatus::Success,
            error: None,
        },
        duration_ms: 3,
        sandboxed: true,
        sandbox_backend: Some("bwrap".into()),
        degradation: vec![],
        approved_roots: vec![],
        network_refusals: vec![],
        remembered_scope: None,
        approved_by_scope: None,
        kind: None,
        principal: None,
        task_id: None,
        task_status: None,
        protocol: None,
    }
}

fn write_log(path: &Path, n: u32) {
    let log = AuditLog::open(path).unwrap();
    for i in 0..n {
        log.append(&record(i, json!({"path": format!("/d/{i}")})))
            .unwrap();
    }
}

fn verify(path: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["audit", "verify"])
        .arg(path)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn rewrite(path: &Path, l: &[String]) {
    std::fs::write(path, l.iter().map(|x| format!("{x}\n")).collect::<String>()).unwrap();
}

#[test]
fn records_carry_ironcurtains_fields_and_redacted_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&p).unwrap();
    log.append(&record(
        1,
        json!({"content": "card 4111 1111 1111 1111, ssn 123-45-6789", "api_key": "abc"}),
    ))
    .unwrap();
    let text = std::fs::read_to_string(&p).unwrap();
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    // Everything on disk but the hex hashes and the time, which may hold any short digit or
    // hex string by chance.
    let mut written = v.as_object().unwrap().clone();
    written.retain(|k, _| !matches!(k.as_str(), "hash" | "prevHash" | "timestamp"));
    let written = serde_json::Value::Object(written).to_string();
    assert!(
        !written.contains("4111") && !written.contains("6789") && !written.contains("abc"),
        "{text}"
    );
    for k in [
        "timestamp",
        "requestId",
        "serverName",
        "toolName",
        "arguments",
        "policyDecision",
        "result",
        "durationMs",
        "sandboxed",
        "sandboxBackend",
        "seq",
        "prevHash",
        "hash",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    assert_eq!(v["policyDecision"]["status"], "allow");
    // Shapes only: no value survives.
    let p2 = dir.path().join("shapes.jsonl");
    let log = AuditLog::open_with(
        &p2,
        AuditOptions {
            redaction: Redaction::Shapes,
            sync_each: true,
        },
    )
    .unwrap();
    log.append(&record(1, json!({"path": "/home/u/secret-plans.txt"})))
        .unwrap();
    let text = std::fs::read_to_string(&p2).unwrap();
    assert!(
        !text.contains("secret-plans") && text.contains("string(24)"),
        "{text}"
    );
}

#[test]
fn chain_continues_across_reopen_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("audit.jsonl");
    write_log(&p, 3);
    write_log(&p, 2);
    let (ok, out) = verify(&p);
    assert!(ok, "{out}");
    assert!(out.contains("5 records, chain intact"), "{out}");
}

#[test]
fn verify_detects_edited_removed_and_reordered_records() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("audit.jsonl");
    write_log(&p, 5);
    let orig = lines(&p);

    let mut edited = orig.clone();
    edited[2] = edited[2].replace("/d/2", "/d/X");
    rewrite(&p, &edited);
    let (ok, out) = verify(&p);
    assert!(!ok && out.contains(":3: record was edited"), "{out}");
    // The edited record is one of the five (it was counted out: "in 4 records").
    assert!(out.contains("1 problem(s) in 5 records"), "{out}");

    let mut removed = orig.clone();
    removed.remove(1);
    rewrite(&p, &removed);
    let (ok, out) = verify(&p);
    assert!(
        !ok && out.contains(":2: ") && out.contains("removed"),
        "{out}"
    );

    let mut reordered = orig.clone();
    reordered.swap(3, 4);
    rewrite(&p, &reordered);
    let (ok, out) = verify(&p);
    assert!(!ok && out.contains(":4: "), "{out}");

    // The untouched log still verifies, so the checks above are not vacuous.
    rewrite(&p, &orig);
    assert!(verify(&p).0);
}

#[test]
fn a_damaged_tail_refuses_to_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("audit.jsonl");
    write_log(&p, 2);
    let mut l = lines(&p);
    l[1] = l[1].replace("read_file", "read_fil3");
    rewrite(&p, &l);
    assert!(AuditLog::open(&p)
        .unwrap_err()
        .to_string()
        .contains("damaged"));
    // A line cut mid-write (no newline) too.
    std::fs::write(&p, "{\"seq\":1").unwrap();
    assert!(AuditLog::open(&p).is_err());
}

#[test]
fn writes_fail_closed_on_a_full_device() {
    // /dev/full accepts the open and fails every write with ENOSPC.
    let log = AuditLog::open(Path::new("/dev/full")).unwrap();
    let e = log.append(&record(1, json!({}))).unwrap_err();
    assert!(e.to_string().contains("No space"), "{e}");
    // Poisoned afterwards: nothing more is accepted.
    assert!(log
        .append(&record(2, json!({})))
        .unwrap_err()
        .to_string()
        .contains("refusing"));
}

#[test]
fn unwritable_path_fails_at_open() {
    let dir = tempfile::tempdir().unwrap();
    // A missing directory is made (the log's first start on a fresh machine); one that
    // cannot be (its parent is a file) fails the open.
    let made = dir.path().join("no-such-dir/audit.jsonl");
    assert!(AuditLog::open(&made).is_ok());
    std::fs::write(dir.path().join("a-file"), "").unwrap();
    let p = dir.path().join("a-file/sub/audit.jsonl");
    assert!(AuditLog::open(&p).is_err());
}

#[test]
fn concurrent_appends_keep_one_valid_chain() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("audit.jsonl");
    let log = std::sync::Arc::new(AuditLog::open(&p).unwrap());
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    log.append(&record(t * 100 + i, json!({"i": i}))).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let (ok, out) = verify(&p);
    assert!(ok && out.contains("200 records"), "{out}");
}

/// Issue 23, finding 11 (regression: two writers on one log forked its chain). The log is
/// locked while open: a second writer is refused naming the file, and once the first closed
/// it the file opens again (the control: the refusal is about the live writer, not the file).
#[test]
fn a_second_writer_on_one_log_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("audit.jsonl");
    let first = AuditLog::open(&p).unwrap();
    first.append(&record(1, json!({}))).unwrap();
    let e = AuditLog::open(&p).unwrap_err().to_string();
    assert!(
        e.contains(&p.display().to_string()) && e.contains("in use by another writer"),
        "{e}"
    );
    first.append(&record(2, json!({}))).unwrap();
    drop(first);
    let again = AuditLog::open(&p).unwrap();
    again.append(&record(3, json!({}))).unwrap();
    let (ok, out) = verify(&p);
    assert!(ok && out.contains("3 records"), "{out}");
}

/// The same with two real `palisade serve` processes given one `auditLog`: the second exits
/// with an error naming the log while the first keeps serving; after the first is gone a
/// new one starts on the same log (the control).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_serve_processes_on_one_audit_log_the_second_is_refused() {
    use palisade::client::{McpClient, SpawnOptions, StderrMode};
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let audit = root.join("audit.jsonl");
    let config = root.join("config.json");
    std::fs::create_dir(root.join("sandbox")).unwrap();
    let cfg = json!({
        "mcpServers": {"fs": {"command": env!("CARGO_BIN_EXE_palisade"), "args": ["fs-server"],
                              "sandbox": {}}},
        "palisade": {"sandboxDir": root.join("sandbox"), "sandboxPolicy": "enforce",
                     "auditLog": audit}
    });
    std::fs::write(&config, cfg.to_string()).unwrap();
    let serve = || {
        Command::new(env!("CARGO_BIN_EXE_palisade"))
            .args(["serve", "--config"])
            .arg(&config)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let mut opts = SpawnOptions::new(env!("CARGO_BIN_EXE_palisade")).args([
        "serve".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
    ]);
    opts.stderr = StderrMode::File(root.join("first.log"));
    opts.timeout = std::time::Duration::from_secs(60);
    let first = McpClient::spawn(opts).await.expect("first serve");
    assert!(!first.list_tools().await.unwrap().is_empty());
    let second = serve();
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{err}");
    assert!(
        err.contains(&audit.display().to_string()) && err.contains("in use by another writer"),
        "{err}"
    );
    // The first still serves.
    assert!(!first.list_tools().await.unwrap().is_empty());
    first.shutdown().await;
    let third = serve();
    let err = String::from_utf8_lossy(&third.stderr);
    assert!(!err.contains("in use by another writer"), "{err}");
}

/// Issue 23, finding 10 (regression: each of these reached the log in clear, and a 12 MiB
/// error text added 12 MiB per call). The control is the record handed to the writer: every
/// secret is in it; the file afterwards holds none of them, the big error costs at most a
/// bounded record, and the chain still verifies.
#[test]
fn secrets_the_review_found_and_big_errors_are_redacted_and_bounded_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("audit.jsonl");
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
    let aws = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    let leaks = [
        "db-hunter2",
        "pw-hunter2",
        "sid=abc123def",
        jwt,
        "s3cr3t-pass",
        "tok-0123456789",
        "sk_live_a1B2c3D4e5F6g7H8",
        "4111.1111.1111.1111",
        aws,
    ];
    let args = json!({
        "db_pass": "db-hunter2", "pw": "pw-hunter2",
        "headers": {"Cookie": "sid=abc123def", "X-Forwarded": format!("Bearer {jwt}")},
        "url": "https://bob:s3cr3t-pass@db.example.com/q?access_token=tok-0123456789",
        "note": "pay with sk_live_a1B2c3D4e5F6g7H8 or 4111.1111.1111.1111",
        "config": format!("aws_secret_access_key = {aws}"),
    });
    let mut rec = record(1, args);
    // The server's error echoes an argument the key name redacts, in a 12 MiB text.
    let echoed = format!(
        "cannot connect with db_pass db-hunter2: {}",
        "x".repeat(12 << 20)
    );
    rec.result = CallResult {
        status: ResultStatus::Error,
        error: Some(echoed),
    };
    let handed = serde_json::to_string(&rec).unwrap();
    for l in leaks {
        assert!(handed.contains(l), "control: {l} not in the record");
    }
    let log = AuditLog::open(&p).unwrap();
    log.append(&rec).unwrap();
    log.append(&record(2, json!({"path": "/d/2"}))).unwrap();
    let text = std::fs::read_to_string(&p).unwrap();
    for l in leaks {
        assert!(!text.contains(l), "{l} written to the log");
    }
    assert!(
        text.len() < 300 * 1024,
        "{} bytes for two records",
        text.len()
    );
    assert!(
        text.contains("bytes in all, sha256 "),
        "no truncation marker"
    );
    let (ok, out) = verify(&p);
    assert!(ok && out.contains("2 records"), "{out}");
}

/// Issue 23, finding 6 (regression: a writer dropped a record, re-sealed the rest, and
/// `audit verify` said "chain intact"). The attacker removes record 3 of 5 and re-seals 4
/// and 5 with the public chain rules. The control: without the head file the re-sealed log
/// passes as intact (the chain alone cannot tell); with it, `audit verify` fails naming the
/// anchor, and the writer refuses to reopen the log.
#[test]
fn a_dropped_and_resealed_record_is_caught_by_the_head_anchor() {
    use palisade::audit::chain::{seal, ChainState};
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("audit.jsonl");
    write_log(&p, 5);
    let head = dir.path().join("audit.jsonl.head");
    assert!(head.is_file(), "no head file next to the log");
    let mut state = ChainState::genesis();
    let mut forged = Vec::new();
    for (i, line) in lines(&p).into_iter().enumerate() {
        if i == 2 {
            continue;
        }
        let mut body: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&line).unwrap();
        for k in ["seq", "prevHash", "hash"] {
            body.remove(k);
        }
        let (l, next) = seal(body, &state);
        forged.push(l);
        state = next;
    }
    rewrite(&p, &forged);

    // Control: the chain itself is intact after re-sealing.
    let saved = std::fs::read(&head).unwrap();
    std::fs::remove_file(&head).unwrap();
    let (ok, out) = verify(&p);
    assert!(ok && out.contains("4 records, chain intact"), "{out}");
    assert!(out.contains("no head file"), "{out}");

    // The anchor catches it.
    std::fs::write(&head, saved).unwrap();
    let (ok, out) = verify(&p);
    assert!(
        !ok && out.contains("ends at seq 4") && out.contains("anchors seq 5"),
        "{out}"
    );
    let e = AuditLog::open(&p).unwrap_err().to_string();
    assert!(e.contains("head file anchors seq 5"), "{e}");
}
