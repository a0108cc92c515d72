//! The serve table: every attack of the hostile server behind `palisade serve` under enforce,
//! once per tier of this run, beside the same server launched directly as the control (each
//! attack must succeed there and fail behind palisade). Ends with the allowlist rows
//! (`allowlist`). The table is written to target/ and, with PALISADE_UPDATE_DOCS=1, into
//! docs/security.md.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use palisade::client::McpClient;
use serde_json::json;

use crate::allowlist::*;
use crate::scene::*;
use crate::table::write_table;

/// (tool, what it tries), in call order. `read_audit_log` comes late so that the real audit
/// log already holds records when the sandboxed server tries to read it.
pub(crate) const ATTACKS: &[(&str, &str)] = &[
    ("read_secret", "read a planted secret outside every root"),
    ("read_ssh_key", "read ~/.ssh/id_ed25519 of the user running palisade"),
    ("read_etc_shadow", "read /etc/shadow"),
    ("read_palisade_config", "read palisade's config file"),
    ("read_palisade_policy", "read palisade's policy file (dynamic lists)"),
    ("read_other_server_state", "read a file in another server's private writable root"),
    ("write_outside_roots", "create a file outside every root (checked on the host)"),
    ("write_into_ro_root", "create a file in a read-only root (checked on the host)"),
    ("write_audit_log", "append to palisade's audit log (checked on the host)"),
    ("write_host_tmp", "create a file in the host's /tmp (checked on the host)"),
    ("write_git_hook", "create .git/hooks/pre-commit in a writable root (checked on the host)"),
    ("write_git_config", "append to .git/config in a writable root (checked on the host)"),
    ("write_nested_git_hook", "create a git hook of a repository nested in a writable root, work/app/.git/hooks (checked on the host)"),
    ("write_bashrc_in_root", "append to .bashrc in a writable root (checked on the host)"),
    ("plant_hard_link", "hard-link the outside secret into a writable root (checked on the host)"),
    ("symlink_then_proxied_read", "plant a symlink to the secret in a shared writable root, then have another server read it through a proxied call"),
    ("hard_link_then_proxied_read", "hard-link the secret into a shared writable root, then have another server read it through a proxied call"),
    ("see_host_process", "read /proc/PID/cmdline of a host process"),
    ("own_env", "find palisade's environment (a canary variable) in its own environment"),
    ("proc_1_environ", "read the launcher's environment from /proc/1/environ or the parent's"),
    ("inherited_fd", "find a descriptor inherited from palisade (fd 7 open on the secret)"),
    ("read_sys", "list /sys/class/net"),
    ("open_block_device", "open a block device node in /dev"),
    ("tcp_to_host_loopback", "connect to a TCP listener on the host's 127.0.0.1"),
    ("tcp_external", "connect to pypi.org:443"),
    ("udp_to_host_loopback", "UDP round trip with an echo server on the host's 127.0.0.1"),
    ("dns_lookup", "resolve pypi.org"),
    ("host_unix_socket", "connect to a unix socket on the host filesystem"),
    ("abstract_unix_socket", "connect to an abstract unix socket of the host"),
    ("af_vsock_socket", "create an AF_VSOCK socket"),
    ("io_uring_setup", "create an io_uring"),
    ("create_user_namespace", "unshare(CLONE_NEWUSER) (the srt 0.0.78 escape)"),
    ("mount_filesystem", "mount a tmpfs"),
    ("pivot_root", "pivot_root into a fresh tmpfs"),
    ("ptrace_host_process", "ptrace (PTRACE_SEIZE) a host process"),
    ("sethostname", "sethostname"),
    ("tiocsti_injection", "inject terminal input with TIOCSTI"),
    ("kill_host_process", "send a signal to a host process"),
    ("kernel_keyring", "add a key to the kernel keyring"),
    ("read_audit_log", "read palisade's audit log"),
];

/// Attacks srt does not stop, by its own design (docs/security.md, "Known gaps of the
/// launcher"), with why: listed so the table says so; under srt they may succeed or fail
/// without failing the suite. Every other attack must be blocked under srt too.
pub(crate) const BEYOND_SRT: &[(&str, &str)] = &[
    ("read_secret", "reads are open outside denyRead"),
    ("read_other_server_state", "reads are open outside denyRead"),
    ("read_sys", "/sys is visible"),
    ("sethostname", "UTS is shared"),
    ("kernel_keyring", "no palisade seccomp filter inside srt"),
    ("inherited_fd", "a pipe of srt's own reaches the command"),
];

/// Attacks the Landlock tier does not stop, by design (docs/security.md says why): it has no
/// PID namespace, so a host process's command line is visible in /proc.
pub(crate) const BEYOND_LANDLOCK: &[&str] = &["see_host_process"];

/// Attacks the host kernel or network may refuse on its own: a failing control skips them.
/// `read_etc_shadow` only works as root: in the container the suite runs as a non-root user.
pub(crate) const HOST_DEPENDENT: &[&str] = &[
    "read_etc_shadow",
    "create_user_namespace",
    "mount_filesystem",
    "pivot_root",
    "af_vsock_socket",
    "io_uring_setup",
    "kernel_keyring",
    "tiocsti_injection",
    "read_sys",
    "open_block_device",
    "tcp_external",
    "dns_lookup",
    "ptrace_host_process",
    "sethostname",
];

/// Runs every attack through `c`; `prefix` is `hostile__`/`peer__` behind the gateway and
/// empty for the direct control (where the peer is the same process). `allowlisted` is the
/// prefix of the allowlisted server, when the allowlist rows run.
pub(crate) async fn run_all(
    sc: &Scene,
    c: &McpClient,
    prefix: (&str, &str),
    allowlisted: Option<&str>,
) -> BTreeMap<String, (bool, String)> {
    let mut out = BTreeMap::new();
    for (name, _) in ATTACKS {
        // The link rows plant from `hostile`, then have `peer` read through the link. In the
        // control the hard link already exists from the `plant_hard_link` row (a second plant
        // reports EEXIST); the read decides.
        let link = match *name {
            "symlink_then_proxied_read" => Some(("plant_symlink", "work/link")),
            "hard_link_then_proxied_read" => Some(("plant_hard_link", "work/hardlink")),
            _ => None,
        };
        let r = if let Some((plant, path)) = link {
            let planted = call(c, &format!("{}{plant}", prefix.0), json!({})).await;
            let read = call(
                c,
                &format!("{}read_path", prefix.1),
                json!({"path": sc.p(path)}),
            )
            .await;
            (read.0, format!("plant: {}; read: {}", planted.1, read.1))
        } else {
            call(c, &format!("{}{name}", prefix.0), json!({})).await
        };
        out.insert(name.to_string(), r);
    }
    // Decided on the host, not by the report.
    let contains = |p: PathBuf| {
        std::fs::read_to_string(p)
            .map(|t| t.contains(PLANTED))
            .unwrap_or(false)
    };
    let host: Vec<(&str, bool)> = vec![
        ("write_outside_roots", sc.p("outside/pwned").exists()),
        ("write_into_ro_root", sc.p("ro/pwned").exists()),
        ("write_audit_log", contains(sc.audit_log())),
        ("write_host_tmp", sc.host_tmp.exists()),
        (
            "write_git_hook",
            sc.p("work/.git/hooks/pre-commit").exists(),
        ),
        ("write_git_config", contains(sc.p("work/.git/config"))),
        (
            "write_nested_git_hook",
            sc.p("work/app/.git/hooks/pre-commit").exists(),
        ),
        ("write_bashrc_in_root", contains(sc.p("work/.bashrc"))),
        ("plant_hard_link", sc.p("work/hardlink").exists()),
    ];
    for (name, planted) in host {
        let e = out.get_mut(name).unwrap();
        e.1 = format!(
            "{} (host: {})",
            e.1,
            if planted { "changed" } else { "unchanged" }
        );
        e.0 = planted;
    }
    if let Some(p) = allowlisted {
        out.extend(run_allowlist(c, prefix.1, p).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attack_through_serve_fails_and_succeeds_without_palisade() {
    let sc = scene().await;
    let log = sc.p("stderr.log");
    let server_cmd = vec![
        venv_python().display().to_string(),
        attacks_dir()
            .join("hostile_server.py")
            .display()
            .to_string(),
        sc.cfg.to_string(),
    ];

    // Control: the same server launched directly; a stand-in audit log and config exist at
    // the paths palisade will use.
    std::fs::write(sc.audit_log(), "{\"stand-in\": true}\n").unwrap();
    write_config(&sc, "bwrap", false);
    let direct = client(&sc, server_cmd, &log).await;
    let plain = run_all(&sc, &direct, ("", ""), Some("")).await;
    direct.shutdown().await;

    // Behind palisade: enforce, once per tier; the allowlist rows where the tier can run them.
    let tiers = tiers();
    let unsupported: Vec<Option<String>> = tiers.iter().map(|t| allowlist_unsupported(t)).collect();
    let mut boxed = Vec::new();
    for (tier, why) in tiers.iter().zip(&unsupported) {
        if let Some(why) = why {
            eprintln!("skipped the allowlist rows under {tier}: {why}");
        }
        boxed.push(behind_serve(&sc, tier, &log, why.is_none()).await);
    }

    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut controls = 0;
    let mut succeeded = vec![0; tiers.len()];
    let all = ATTACKS.iter().chain(ALLOWLIST_ATTACKS);
    for (name, what) in all.clone() {
        let (c_ok, c_detail) = plain[*name].clone();
        if c_ok {
            controls += 1;
        } else if HOST_DEPENDENT.contains(name) {
            eprintln!("skipped {name}: the host itself refuses it ({c_detail})");
        } else {
            failures.push(format!("control for {name} failed: {c_detail}"));
        }
        let control_cell = if c_ok {
            "succeeds".to_string()
        } else {
            format!("fails ({c_detail})")
        };
        let mut cells = vec![control_cell];
        for (i, tier) in tiers.iter().enumerate() {
            let Some((s_ok, s_detail)) = boxed[i].get(*name).cloned() else {
                let why = unsupported[i].clone().unwrap_or_default();
                cells.push(format!("not run: {why}"));
                continue;
            };
            if *name == POSITIVE {
                if !s_ok {
                    failures.push(format!(
                        "the allowed name must be reachable through the proxy ({tier}): {s_detail}"
                    ));
                }
                cells.push(if s_ok {
                    format!("reached, as it must be ({s_detail})")
                } else {
                    format!("**BLOCKED** ({s_detail})")
                });
                continue;
            }
            let beyond_srt = BEYOND_SRT
                .iter()
                .find(|(n, _)| *tier == "srt" && n == name)
                .map(|(_, why)| *why);
            let beyond = *tier == "landlock" && BEYOND_LANDLOCK.contains(name);
            if s_ok {
                succeeded[i] += 1;
                if !beyond && beyond_srt.is_none() {
                    failures.push(format!("ESCAPE through serve ({tier}) {name}: {s_detail}"));
                }
            } else if let Some(why) = not_a_sandbox_refusal(name, &s_detail) {
                failures.push(format!(
                    "{name} did not run behind serve ({tier}) ({why}): {s_detail}"
                ));
            } else if beyond {
                failures.push(format!(
                    "{name} is listed as beyond Landlock but was blocked: update BEYOND_LANDLOCK and docs/security.md ({s_detail})"
                ));
            }
            cells.push(match (s_ok, beyond) {
                (true, _) if beyond_srt.is_some() => format!(
                    "succeeds: srt's model ({}) ({s_detail})",
                    beyond_srt.unwrap_or_default()
                ),
                (true, true) => {
                    format!("succeeds: beyond this tier (no PID namespace) ({s_detail})")
                }
                (true, false) => format!("**SUCCEEDS** ({s_detail})"),
                (false, _) => format!("blocked: {s_detail}"),
            });
        }
        rows.push(format!("| {what} | {} |", cells.join(" | ")));
    }
    let headers: Vec<String> = tiers
        .iter()
        .map(|t| format!("behind `palisade serve` (enforce, {t})"))
        .collect();
    let totals: Vec<String> = tiers
        .iter()
        .zip(&succeeded)
        .map(|(t, n)| format!("{n} under {t}"))
        .collect();
    let table = format!(
        "| attack (hostile MCP server) | launched directly (control) | {} |\n|---|---|{}\n{}\n\n{} attacks and 1 positive row (the allowed name, which must be reached); control succeeded for {controls}; succeeded behind palisade: {} (beyond Landlock by design: {}{}).\n",
        headers.join(" | "),
        "---|".repeat(tiers.len()),
        rows.join("\n"),
        all.count() - 1,
        totals.join(", "),
        BEYOND_LANDLOCK.join(", "),
        if tiers.contains(&"srt") {
            let names: Vec<&str> = BEYOND_SRT.iter().map(|(n, _)| *n).collect();
            format!("; beyond srt by its design: {}", names.join(", "))
        } else {
            String::new()
        },
    )
    .replace(&sc.dir.path().display().to_string(), "$SCENE")
    .replace(&sc.host_tmp.display().to_string(), "/tmp/palisade-hostile-ID")
    .replace(&format!("pid {}", sc.marker_proc.id()), "pid PID")
    .replace(&format!("/proc/{}/", sc.marker_proc.id()), "/proc/PID/")
    .replace(&format!(", {})", sc.marker_proc.id()), ", PID)")
    .replace(&format!(".test:{}", sc.origin_port), ".test:ORIGIN")
    .replace(&format!("127.0.0.1:{} ", sc.origin_port), "127.0.0.1:ORIGIN ");
    // The proxies' ports, pipe inodes and key serials change with every run.
    let table = mask_ports(&table, "network access to 127.0.0.");
    let table = mask_number(&table, "pipe:[");
    let table = mask_number(&table, "created key ");
    println!("{table}");
    write_table(&table);
    assert!(
        failures.is_empty(),
        "{}\n\n{table}\npalisade stderr:\n{}",
        failures.join("\n"),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    if let Some(b) = tiers.iter().position(|t| *t == "bwrap") {
        assert_eq!(succeeded[b], 0, "nothing gets through bwrap");
    }
}

/// Runs every attack behind `palisade serve` with `backend`, after checking that both
/// servers are up and the peer's own root works.
async fn behind_serve(
    sc: &Scene,
    backend: &str,
    log: &Path,
    allowlist: bool,
) -> BTreeMap<String, (bool, String)> {
    sc.reset();
    // A fresh log per tier, and its head file with it (the head anchors the old log's end).
    let _ = std::fs::remove_file(sc.audit_log());
    let _ = std::fs::remove_file(palisade::audit::anchor::head_path(&sc.audit_log()));
    let config = write_config(sc, backend, allowlist);
    let serve = vec![
        palisade_bin(),
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    let gw = client(sc, serve, log).await;
    let tools: Vec<String> = gw
        .list_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(
        tools.contains(&"hostile__read_secret".to_string())
            && tools.contains(&"peer__read_path".to_string()),
        "both servers must be up under enforce ({backend}): {tools:?}\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    assert!(
        !allowlist || tools.contains(&"allowlisted__egress_allowed".to_string()),
        "the allowlisted server must be up under enforce ({backend}): {tools:?}\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    // Positive control: the roots themselves work through the gateway.
    let (ok, detail) = call(
        &gw,
        "peer__read_path",
        json!({"path": sc.p("peer/secret.txt")}),
    )
    .await;
    assert!(
        ok,
        "a read inside the peer's own root must work ({backend}): {detail}"
    );
    let boxed = run_all(
        sc,
        &gw,
        ("hostile__", "peer__"),
        allowlist.then_some("allowlisted__"),
    )
    .await;
    gw.shutdown().await;
    // The audit log names the tier actually used.
    let audit = std::fs::read_to_string(sc.audit_log()).unwrap_or_default();
    assert!(
        audit.contains(&format!("\"sandboxBackend\":\"{backend}\"")),
        "the audit log names the {backend} tier: {}",
        audit.lines().next().unwrap_or("")
    );
    boxed
}

/// `text` with the port after each `PREFIX<digit>:` replaced by `PORT` (a name such as
/// `ORIGIN` stays).
fn mask_ports(text: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        let (head, tail) = rest.split_at(i + prefix.len());
        out.push_str(head);
        let host_end = tail
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (octet, after) = tail.split_at(host_end);
        out.push_str(octet);
        rest = after;
        if let Some(port_part) = after.strip_prefix(':') {
            let digits = port_part
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(port_part.len());
            if digits > 0 {
                out.push_str(":PORT");
                rest = &port_part[digits..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `text` with the number after each `prefix` replaced by `N`.
fn mask_number(text: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        let (head, tail) = rest.split_at(i + prefix.len());
        out.push_str(head);
        let digits = tail
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(tail.len());
        if digits > 0 {
            out.push('N');
        }
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}
