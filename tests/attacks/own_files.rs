//! Palisade's own files (config, lists, audit log and its head file) inside a server's
//! writable root: masked behind `palisade serve`, open to the control (issue 23, finding 6).

use std::path::PathBuf;

use serde_json::json;

use crate::scene::*;

/// Issue 23, finding 6 (regression: Palisade's own files were refused to the agent by the
/// policy, but a server whose writable root held them could truncate the audit log). The
/// hostile server gets `allowWrite` on the directory holding the config, the lists file, the
/// audit log and its head file. The control: launched directly, every attack works; behind
/// `palisade serve` each fails, and the log still verifies against its head afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn palisades_own_files_are_masked_in_a_writable_root_that_holds_them() {
    const OWN: &[&str] = &[
        "read_palisade_config",
        "read_palisade_policy",
        "read_audit_log",
        "write_audit_log",
        "truncate_audit_log",
        "replace_audit_log",
        "rewrite_audit_head",
    ];
    let sc = scene().await;
    let log = sc.p("stderr-own.log");
    let config = sc.p("palisade/config.json");
    let write_own_config = || {
        let cfg = json!({
            "mcpServers": {"hostile": {
                "command": venv_python(),
                "args": [attacks_dir().join("hostile_server.py"), sc.cfg.to_string()],
                "sandbox": {"filesystem": {"allowWrite": [sc.p("palisade")],
                                           "allowRead": [attacks_dir()]}}
            }},
            "palisade": {"sandboxDir": sc.p("sandbox"), "sandboxPolicy": "enforce",
                         "backend": "bwrap", "auditLog": sc.audit_log(),
                         "lists": sc.p("palisade/lists.json")}
        });
        std::fs::write(&config, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    };
    let head = PathBuf::from(format!("{}.head", sc.audit_log().display()));

    // Control: launched directly, with stand-ins at the paths palisade uses.
    write_own_config();
    for attack in OWN {
        std::fs::write(sc.audit_log(), "{\"stand-in\": true}\n").unwrap();
        let direct = client(
            &sc,
            vec![
                venv_python().display().to_string(),
                attacks_dir()
                    .join("hostile_server.py")
                    .display()
                    .to_string(),
                sc.cfg.to_string(),
            ],
            &log,
        )
        .await;
        let (ok, detail) = call(&direct, attack, json!({})).await;
        direct.shutdown().await;
        assert!(ok, "control {attack} failed: {detail}");
    }

    // Behind palisade.
    let _ = std::fs::remove_file(sc.audit_log());
    let _ = std::fs::remove_file(&head);
    write_own_config();
    let serve = vec![
        env!("CARGO_BIN_EXE_palisade").to_string(),
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    let gw = client(&sc, serve, &log).await;
    let mut escaped = Vec::new();
    for attack in OWN {
        let (ok, detail) = call(&gw, &format!("hostile__{attack}"), json!({})).await;
        if ok || not_a_sandbox_refusal(attack, &detail).is_some() {
            escaped.push(format!("{attack}: ok={ok} {detail}"));
        }
    }
    gw.shutdown().await;
    let text = std::fs::read_to_string(sc.audit_log()).unwrap();
    assert!(
        escaped.is_empty(),
        "{}\n{}",
        escaped.join("\n"),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(!text.contains(PLANTED), "{text}");
    assert_eq!(text.lines().count(), OWN.len(), "{text}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["audit", "verify"])
        .arg(sc.audit_log())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && report.contains("chain intact") && !report.contains("no head"),
        "{report}"
    );
}
