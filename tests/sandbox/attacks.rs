//! Every attack of the hostile program fails in the sandbox and succeeds without it (the
//! control); attacks the host itself refuses are reported as skipped.

use std::path::Path;
use std::process::Command;

use crate::common::{hostile, palisade, text, PY};
use crate::hostile::{attack, scene, write_attack_table, ATTACKS, HOST_DEPENDENT};
use crate::skip;

#[test]
fn every_attack_fails_in_the_sandbox_and_succeeds_without_it() {
    if !Path::new(PY).exists() {
        skip::skip(&format!(
            "{PY} (the hostile program's interpreter) is not installed"
        ));
        return;
    }
    let sc = scene();
    let d = sc.dir.path();
    let cfg = sc.cfg.to_string();

    // Control: the same program, unsandboxed, under a shell that carries the canary (so the
    // parent's /proc/PID/environ holds it, as bwrap's would if palisade did not clear it).
    let mut control = Command::new("/bin/sh");
    control
        .args(["-c", "\"$0\" \"$1\" \"$2\"; exit $?", PY])
        .arg(hostile())
        .arg(&cfg)
        .env("HOME", d.join("home"));
    let plain = attack(&sc, control);

    let mut run = palisade();
    run.arg("run")
        .arg("--ro")
        .arg(d.join("ro"))
        .arg("--rw")
        .arg(d.join("work"))
        .args(["--", PY])
        .arg(hostile())
        .arg(&cfg)
        .env("HOME", d.join("home"));
    let boxed = attack(&sc, run);

    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for (name, what) in ATTACKS {
        let (c_ok, c_detail) = plain.get(*name).cloned().expect(name);
        let (s_ok, s_detail) = boxed.get(*name).cloned().expect(name);
        let control_cell = if c_ok {
            "succeeds".to_string()
        } else {
            format!("fails ({c_detail})")
        };
        let sandbox_cell = if s_ok {
            format!("**SUCCEEDS** ({s_detail})")
        } else {
            format!("blocked: {s_detail}")
        };
        if !c_ok {
            if HOST_DEPENDENT.contains(name) {
                eprintln!("skipped {name}: the host itself refuses it ({c_detail})");
            } else {
                failures.push(format!("control for {name} failed: {c_detail}"));
            }
        }
        if s_ok {
            failures.push(format!("SANDBOX ESCAPE {name}: {s_detail}"));
        }
        rows.push(format!("| {what} | {control_cell} | {sandbox_cell} |"));
    }
    // Temporary paths differ each run; keep the table stable for the docs.
    let table = format!(
        "| attack | unsandboxed (control) | `palisade run` |\n|---|---|---|\n{}\n",
        rows.join("\n")
    )
    .replace(&d.display().to_string(), "$SCENE")
    .replace(&format!("/proc/{}/", sc.marker_proc.id()), "/proc/PID/");
    write_attack_table(&table);
    assert!(failures.is_empty(), "{}\n\n{table}", failures.join("\n"));
    // Positive control: the grants themselves still work.
    let out = palisade()
        .arg("run")
        .arg("--ro")
        .arg(d.join("ro"))
        .arg("--rw")
        .arg(d.join("work"))
        .args(["--", "/bin/sh", "-c"])
        .arg(format!(
            "cat {}/ro/readme && echo written > {}/work/out",
            d.display(),
            d.display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "read me");
    assert_eq!(
        std::fs::read_to_string(d.join("work/out")).unwrap(),
        "written\n"
    );
}
