//! The table: every real server through `palisade serve` under enforce with its profile, each
//! check passing or a listed gap; server-filesystem and fs-server under Landlock.

use std::path::Path;

use crate::checks::*;
use crate::*;

/// Checks known to fail today, each with the reason: (server, check, reason). The only place
/// a failing check may be excused; everything else that fails fails the test.
const KNOWN_GAPS: &[(&str, &str, &str)] = &[];

fn known_gap(server: &str, check: &str) -> Option<&'static str> {
    KNOWN_GAPS
        .iter()
        .find(|(s, c, _)| *s == server && *c == check)
        .map(|(_, _, why)| *why)
}

#[test]
fn real_servers_work_inside_their_profiles() {
    if skipped_without_bwrap() {
        return;
    }
    // COMPAT_ONLY=git,time runs a subset (while developing a profile).
    let only = std::env::var("COMPAT_ONLY").unwrap_or_default();
    let mut all = Vec::new();
    for (name, run) in [
        ("filesystem", filesystem as fn() -> Vec<Row>),
        ("filesystem-widen", filesystem_widen),
        ("fs-server", fs_server),
        ("everything", everything),
        ("memory", memory),
        ("git", git),
        ("time", time),
        ("sequential-thinking", sequential_thinking),
        ("fetch", fetch),
    ] {
        if only.is_empty() || only.split(',').any(|o| o == name) {
            all.extend(run());
        }
    }
    let status = |r: &Row| match (r.pass, known_gap(r.server, &r.check)) {
        (true, Some(_)) => "STALE",
        (true, None) => "PASS",
        (false, Some(_)) => "GAP",
        (false, None) => "FAIL",
    };
    // The report goes to stdout (seen with --nocapture) and to target/tmp/compat-report.txt,
    // which scripts/test.sh prints: libtest shows a passing test's output to no one.
    use std::fmt::Write as _;
    let mut report = String::new();
    let _ = writeln!(
        report,
        "{:<20} {:<26} {:<50} {:<6} detail",
        "server", "profile", "check", "result"
    );
    for r in &all {
        let detail: String = r.detail.chars().take(90).collect();
        let _ = writeln!(
            report,
            "{:<20} {:<26} {:<50} {:<6} {detail}",
            r.server,
            r.profile,
            r.check,
            status(r)
        );
    }
    let _ = writeln!(report);
    let mut servers: Vec<&str> = all.iter().map(|r| r.server).collect();
    servers.dedup();
    for server in servers {
        let mine: Vec<&Row> = all.iter().filter(|r| r.server == server).collect();
        let count = |s: &str| mine.iter().filter(|r| status(r) == s).count();
        let _ = writeln!(
            report,
            "{server:<20} {} passed, {} failed, {} known gaps{}",
            count("PASS") + count("STALE"),
            count("FAIL"),
            count("GAP"),
            if count("STALE") > 0 {
                format!(", {} known gaps that now pass", count("STALE"))
            } else {
                String::new()
            }
        );
    }
    for (server, check, why) in KNOWN_GAPS {
        let _ = writeln!(report, "known gap: {server} / {check}: {why}");
    }
    println!("\n{report}");
    let _ = std::fs::write(
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("compat-report.txt"),
        &report,
    );
    let failed: Vec<String> = all
        .iter()
        .filter(|r| matches!(status(r), "FAIL" | "STALE"))
        .map(|r| match status(r) {
            "STALE" => format!(
                "{} / {}: listed in KNOWN_GAPS but passes now; remove it from the list",
                r.server, r.check
            ),
            _ => format!("{} / {}: {}", r.server, r.check, r.detail),
        })
        .collect();
    assert!(failed.is_empty(), "failed checks:\n{}", failed.join("\n"));
}

/// The Landlock tier (no namespaces) runs real servers too: server-filesystem (node, roots
/// delivered on its command line) and palisade's own fs-server pass every check of their
/// scenarios, the sandbox checks (secret outside the roots, the launcher's environment)
/// included.
#[test]
fn server_filesystem_and_fs_server_work_under_landlock() {
    let mut all = filesystem_on(Ws::with_backend("landlock"));
    all.extend(fs_server_on(Ws::with_backend("landlock")));
    let failed: Vec<String> = all
        .iter()
        .filter(|r| !r.pass)
        .map(|r| format!("{} / {}: {}", r.server, r.check, r.detail))
        .collect();
    println!(
        "landlock: {} checks, {} passed",
        all.len(),
        all.len() - failed.len()
    );
    assert!(
        failed.is_empty(),
        "failed under landlock:\n{}",
        failed.join("\n")
    );
}
