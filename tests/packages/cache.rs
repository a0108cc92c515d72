//! What the sandboxes around the cache let through: a cached entry is read-only and the other
//! entries and the lock are invisible to its server; a fetch sandbox writes only its entry and
//! reaches only its registry. Each probe has its control, run directly.

use std::path::Path;
use std::process::Command;

use crate::*;

/// What a process with the venv of a cached `uvx` entry sees, as the rewritten server does:
/// the sandbox binds that venv (its install directory) read-only and nothing else of the
/// cache, nor the home the cache lives in (the attack suite's SSH-key read, and ~/.npmrc).
/// The same probe run directly is the control: there it writes into the entry, sees the
/// other entry and the lock, and reads both files.
#[test]
fn a_cached_entry_is_read_only_and_other_entries_and_the_lock_are_invisible_in_the_sandbox() {
    let home = Home::new();
    for argv in [
        &["npx", "-y", "@modelcontextprotocol/server-memory"][..],
        &["uvx", "mcp-server-time"][..],
    ] {
        let mut args = vec!["prefetch", "--"];
        args.extend_from_slice(argv);
        let out = output(home.palisade(&args, false));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let lock = home.lock();
    let entry = |key: &str, eco: &str| {
        home.cache()
            .join(eco)
            .join(lock["packages"][key]["entry"].as_str().unwrap())
    };
    let time = entry("pypi:mcp-server-time@latest", "pypi");
    let memory = entry("npm:@modelcontextprotocol/server-memory@latest", "npm");
    let python = time.join("venv/bin/python");
    // The attack suite's home reads, from a server whose entry lives under HOME/.cache: an
    // SSH key, and ~/.npmrc (registry tokens; the fetch sandbox reads it, a server must not).
    std::fs::create_dir(home.path().join(".ssh")).unwrap();
    std::fs::write(home.path().join(".ssh/id_ed25519"), "key").unwrap();
    std::fs::write(
        home.path().join(".npmrc"),
        "//registry.npmjs.org/:_authToken=palisade-test-token\n",
    )
    .unwrap();
    let probe = "import os, sys\n\
        entry, other, lock, key, npmrc = sys.argv[1:6]\n\
        seen = []\n\
        try:\n    open(os.path.join(entry, 'planted'), 'w').close(); seen.append('wrote-entry')\n\
        except OSError:\n    pass\n\
        seen += ['sees-other'] if os.path.exists(other) else []\n\
        seen += ['sees-lock'] if os.path.exists(lock) else []\n\
        for name, path in (('reads-key', key), ('reads-npmrc', npmrc)):\n\
        \x20   try:\n\
        \x20       open(path).read(); seen.append(name)\n\
        \x20   except OSError:\n\
        \x20       pass\n\
        print(','.join(seen) or 'contained')\n";
    let probe_args = [
        "-c".to_string(),
        probe.to_string(),
        time.join("venv").display().to_string(),
        memory.display().to_string(),
        home.cache().join("lock.json").display().to_string(),
        home.path().join(".ssh/id_ed25519").display().to_string(),
        home.path().join(".npmrc").display().to_string(),
    ];
    let mut sandboxed = home.palisade(&["run", "--", python.to_str().unwrap()], true);
    sandboxed.args(&probe_args);
    let out = output(sandboxed);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        "contained",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !time.join("venv/planted").exists(),
        "nothing planted on the host"
    );
    // Control: the same probe outside the sandbox reaches all three.
    let mut direct = Command::new(&python);
    direct.args(&probe_args);
    let out = output(direct);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "wrote-entry,sees-other,sees-lock,reads-key,reads-npmrc"
    );
}

/// A fetch sandbox (`build` makes it for an entry directory) running a probe in the client's
/// place: it writes its entry and reaches `allowed`, but cannot write beside the entry in the
/// cache (checked on the host) nor reach `other`. The same probe run directly is the control.
fn probe_fetch_sandbox(
    build: impl Fn(&Path) -> palisade::sandbox::launch::LaunchRequest,
    allowed: &str,
    other: &str,
) {
    let work = tempfile::tempdir().unwrap();
    let eco = work.path().join("cache/eco");
    let entry = eco.join(".fetch-probe");
    std::fs::create_dir_all(&entry).unwrap();
    let script = format!(
        "touch {eco}/planted 2>/dev/null && echo wrote-outside\n\
         touch {entry}/inside && echo wrote-entry\n\
         curl -s -m 20 -o /dev/null {allowed} && echo reached-allowed\n\
         curl -s -m 20 -o /dev/null {other} && echo reached-other\n\
         exit 0\n",
        eco = eco.display(),
        entry = entry.display()
    );
    let mut req = build(&entry);
    req.command = "/bin/sh".into();
    req.args = vec!["-c".into(), script.clone()];
    let log = work.path().join("probe.log");
    palisade::packages::contained::run_in_sandbox(req, &log, "a probe").unwrap();
    let seen = std::fs::read_to_string(&log).unwrap();
    assert!(seen.contains("wrote-entry"), "{seen}");
    assert!(seen.contains("reached-allowed"), "{seen}");
    assert!(!seen.contains("reached-other"), "{seen}");
    // A write beside the entry may succeed in the sandbox's own scratch root (bwrap makes
    // the entry's parents there); what matters is the host.
    assert!(
        !eco.join("planted").exists(),
        "nothing planted beside the entry: {seen}"
    );
    // Control: unsandboxed, the same probe writes beside the entry and reaches `other`.
    let out = output({
        let mut c = Command::new("/bin/sh");
        c.args(["-c", &script]);
        c
    });
    let direct = String::from_utf8_lossy(&out.stdout);
    assert!(eco.join("planted").exists(), "{direct}");
    assert!(direct.contains("reached-other"), "{direct}");
}

#[test]
fn the_npm_fetch_sandbox_writes_only_its_entry_and_reaches_only_the_registry() {
    probe_fetch_sandbox(
        |entry| {
            palisade::packages::contained::fetch_request(
                Path::new("/usr/bin/npm"),
                Vec::new(),
                entry,
                "https://registry.npmjs.org/",
            )
            .unwrap()
        },
        "https://registry.npmjs.org/",
        "https://pypi.org/simple/",
    );
}

#[test]
fn the_uv_fetch_sandbox_writes_only_its_entry_and_reaches_only_the_index() {
    let uv = support::deps().join("venv/bin/uv");
    probe_fetch_sandbox(
        |entry| {
            palisade::packages::contained::uv_request(
                &uv,
                Vec::new(),
                entry,
                "https://pypi.org/simple",
                None,
            )
            .unwrap()
        },
        "https://files.pythonhosted.org/",
        "https://registry.npmjs.org/",
    );
}

/// Where bubblewrap cannot run (a container; here `PALISADE_BWRAP` names nothing) the fetch
/// sandbox is Landlock's, and its registry allowlist holds there by port only: accepted for
/// Palisade's own fetch (the user's npm), while a server's allowlist is refused under
/// enforce. Before that distinction, `npx -y` lines could not be fetched in a container.
#[test]
fn a_fetch_where_only_landlock_works_reaches_its_registry() {
    if support::skip::landlock_abi().unwrap_or(0) < 4 {
        return support::skip("Landlock ABI 4 is not available here");
    }
    let home = Home::new();
    let mut cmd = home.palisade(
        &[
            "prefetch",
            "--",
            "npx",
            "-y",
            "@modelcontextprotocol/server-memory",
        ],
        false,
    );
    cmd.env("PALISADE_BWRAP", "/nonexistent/bwrap");
    let out = output(cmd);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        home.lock()["packages"]["npm:@modelcontextprotocol/server-memory@latest"]["version"]
            .is_string(),
        "{err}"
    );
}
