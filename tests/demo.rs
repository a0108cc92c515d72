//! `palisade demo` end to end: the real gateway, the real fs-server, the real sandbox when
//! bubblewrap works here. Proves each step's outcome from the transcript's verdicts and the
//! facts they report, not from the steps' titles.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod support;

use std::process::Command;

/// One numbered step of the transcript: its title, its tag (`ok`, `WARNING`, `FAILED`) and
/// the text after the tag (continuation lines included).
#[derive(Debug)]
struct Step {
    title: String,
    tag: String,
    text: String,
}

fn steps(stdout: &str) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    let mut lines = stdout.lines().peekable();
    while let Some(line) = lines.next() {
        let Some((num, title)) = line.split_once(". ") else {
            continue;
        };
        if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Some(tagged) = lines.next().map(str::trim_start) else {
            break;
        };
        let Some((tag, rest)) = tagged.strip_prefix('[').and_then(|t| t.split_once("] ")) else {
            continue;
        };
        let mut text = rest.to_string();
        while let Some(more) = lines.peek() {
            if more.is_empty() || !more.starts_with("   ") {
                break;
            }
            text.push('\n');
            text.push_str(more.trim());
            lines.next();
        }
        out.push(Step {
            title: title.to_string(),
            tag: tag.to_string(),
            text,
        });
    }
    out
}

// Regression (first contact, #1): on every machine with bubblewrap step 4 ended in a
// WARNING ("the sandbox never got to act") and this test passed because it only looked for
// the steps' headings.
#[test]
fn demo_shows_each_layer_doing_its_job_and_cleans_up() {
    let (stdout, ctx) = run_demo(&[]);
    assert!(
        !stdout.contains("demo-secret-7f3a"),
        "the secret leaked\n{ctx}"
    );
    let enforcing = stdout.contains("sandbox   : enforce");
    if !enforcing {
        support::skip("bubblewrap cannot build a sandbox here; the demo ran in warn mode");
    }
    let s = steps(&stdout);
    assert_eq!(s.len(), 5, "five steps expected\n{ctx}");

    // 1. The fs-server's tools, namespaced.
    assert_eq!(s[0].tag, "ok", "{ctx}");
    assert!(
        s[0].text.contains("fs__read") && s[0].text.contains("fs__write"),
        "{ctx}"
    );
    // 2. The read inside the workspace returned the file's content.
    assert_eq!(s[1].tag, "ok", "{ctx}");
    assert!(
        s[1].text
            .contains("Hello from the Palisade demo workspace."),
        "{ctx}"
    );
    // 3. The policy, not some other layer, refused the read outside.
    assert_eq!(s[2].tag, "ok", "{ctx}");
    assert!(
        s[2].text.starts_with("refused by the policy: DENIED"),
        "{ctx}"
    );
    if enforcing {
        // 4. The kernel refused the planted hook, and the gateway said so.
        assert_eq!(s[3].tag, "ok", "step 4 must be the kernel's refusal\n{ctx}");
        assert!(s[3].title.contains(".git/hooks/pre-commit"), "{ctx}");
        assert!(
            s[3].text
                .starts_with("blocked by the sandbox: [SANDBOX BLOCKED]"),
            "{ctx}"
        );
        assert!(s[3].text.contains("the file does not exist"), "{ctx}");
    } else {
        assert_eq!(s[3].tag, "WARNING", "{ctx}");
    }
    // 5. One audit record per call, each with the decision and result that happened.
    assert_eq!(s[4].tag, "ok", "{ctx}");
    let records: Vec<&str> = s[4].text.lines().skip(1).collect();
    assert_eq!(records.len(), 3, "{ctx}");
    assert!(
        records[0].contains("fs/read  policy=allow") && records[0].contains("result=success"),
        "{ctx}"
    );
    assert!(
        records[1].contains("fs/read  policy=deny") && records[1].contains("result=denied"),
        "{ctx}"
    );
    assert!(
        records[2].contains("fs/write  policy=allow") && records[2].contains("result=error"),
        "{ctx}"
    );
    for r in &records {
        assert_eq!(r.contains("sandboxed=true"), enforcing, "{ctx}");
    }
    if enforcing {
        assert!(
            stdout.contains("Result: everything behaved as designed."),
            "{ctx}"
        );
    }
    // Whatever the outcome, the workspace is gone. Its own, named in the transcript: the
    // other test's demo may be running beside this one, with a workspace of its own.
    let workspace = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("workspace : "))
        .and_then(|rest| rest.split_whitespace().next())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| panic!("the transcript names its workspace\n{ctx}"));
    assert!(
        workspace.starts_with(std::env::temp_dir())
            && workspace
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("palisade-demo-")),
        "{ctx}"
    );
    assert!(
        !workspace.exists(),
        "{} was left behind",
        workspace.display()
    );
}

// Where bubblewrap cannot run (here: PALISADE_BWRAP names nothing) but Landlock can, the demo
// said "bubblewrap (bwrap) is not installed, so servers run WITHOUT a sandbox" and ran in
// warn mode, though `check` and `serve` choose the Landlock tier there. It now takes the
// same decision: enforce under Landlock, the planted hook refused by the kernel, and the
// refusal naming its own fix (protectDangerousFiles), not a grant the workspace already has.
#[test]
fn without_bubblewrap_the_demo_runs_under_landlock_and_says_so() {
    if support::skip::landlock_abi().is_none() {
        return support::skip("Landlock is not available here");
    }
    let (stdout, ctx) = run_demo(&[("PALISADE_BWRAP", "/nonexistent/bwrap")]);
    assert!(stdout.contains("sandbox   : enforce ("), "{ctx}");
    assert!(stdout.contains("Landlock ABI"), "{ctx}");
    assert!(!stdout.contains("WITHOUT a sandbox"), "{ctx}");
    let s = steps(&stdout);
    assert_eq!(s.len(), 5, "{ctx}");
    assert_eq!(s[3].tag, "ok", "step 4 must be the kernel's refusal\n{ctx}");
    assert!(s[3].text.contains("protectDangerousFiles"), "{ctx}");
    assert!(
        stdout.contains("Result: everything behaved as designed."),
        "{ctx}"
    );
}

/// `palisade demo` with `env` added, asserted to exit 0: its transcript, and the context a
/// failed assertion shows (transcript and stderr).
fn run_demo(env: &[(&str, &str)]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .arg("demo")
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let ctx = format!(
        "transcript:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "demo failed\n{ctx}");
    (stdout, ctx)
}
