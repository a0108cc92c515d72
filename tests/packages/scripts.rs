//! Install scripts: a profile that asks for them runs them in the fetch sandbox (a probe
//! package served by a local registry shows what they can reach); they are off by default, and
//! a package that needs none starts as before.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::*;

/// A package built here whose `postinstall` tries to write outside its cache entry (a host
/// directory under a temp dir, the host HOME, another cache entry) and records in its own
/// package directory (the legitimate part of an install) which writes it believed done. Its
/// bin needs nothing the script makes: it says it started and whether the script ran.
const PROBE: &str = "palisade-probe-postinstall";

/// Where the probe's script tries to write, on the host.
struct Targets {
    outside: PathBuf,
    host_home: PathBuf,
    other_entry: PathBuf,
}

impl Targets {
    fn new(home: &Home, outside_dir: &Path) -> Self {
        let other = home.cache().join("npm/0123456789abcdef0123456789abcdef");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("index.js"), "// another package\n").unwrap();
        Targets {
            outside: outside_dir.join("planted-by-postinstall"),
            host_home: home.path().join(".bashrc"),
            other_entry: other.join("planted-by-postinstall"),
        }
    }

    /// The targets the script managed to write on the host.
    fn planted(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.outside.exists() {
            out.push("outside");
        }
        if self.host_home.exists() {
            out.push("host-home");
        }
        if self.other_entry.exists() {
            out.push("other-entry");
        }
        out
    }
}

/// `npm pack` of the probe package writing to `t`: the tarball's bytes, its integrity and
/// shasum (as npm computed them).
fn pack_probe(work: &Path, t: &Targets) -> (Vec<u8>, String, String) {
    let src = work.join("probe-src");
    std::fs::create_dir_all(&src).unwrap();
    let manifest = json!({
        "name": PROBE,
        "version": "1.0.0",
        "bin": {PROBE: "bin.js"},
        "scripts": {"postinstall": "node postinstall.js"},
    });
    std::fs::write(src.join("package.json"), manifest.to_string()).unwrap();
    let script = format!(
        "const fs = require('fs');\n\
         const seen = [];\n\
         for (const [label, path] of [['outside', {outside}], ['host-home', {home}], \
         ['env-home', process.env.HOME + '/.profile'], ['other-entry', {other}]]) {{\n\
         \x20 try {{ fs.writeFileSync(path, 'planted\\n'); seen.push(label); }}\n\
         \x20 catch (e) {{ seen.push(label + ':' + e.code); }}\n\
         }}\n\
         fs.writeFileSync(__dirname + '/built.txt', seen.join(',') + '\\n');\n",
        outside = json!(t.outside.display().to_string()),
        home = json!(t.host_home.display().to_string()),
        other = json!(t.other_entry.display().to_string()),
    );
    std::fs::write(src.join("postinstall.js"), script).unwrap();
    std::fs::write(
        src.join("bin.js"),
        "#!/usr/bin/env node\n\
         const built = require('fs').existsSync(__dirname + '/built.txt');\n\
         console.log('probe started, postinstall ran: ' + built);\n",
    )
    .unwrap();
    let out = Command::new("npm")
        .args(["pack", "--json", "--pack-destination"])
        .arg(work)
        .current_dir(&src)
        .env("npm_config_update_notifier", "false")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let packed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tgz = std::fs::read(work.join(packed[0]["filename"].as_str().unwrap())).unwrap();
    (
        tgz,
        packed[0]["integrity"].as_str().unwrap().to_string(),
        packed[0]["shasum"].as_str().unwrap().to_string(),
    )
}

/// A registry for one package, on 127.0.0.2 (a loopback address outside the sandbox's
/// NO_PROXY list, so npm in the fetch sandbox reaches it through the egress proxy as it
/// would a real registry). Answers the package document and the tarball; stops on drop.
struct Registry {
    url: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Registry {
    fn serve(tgz: Vec<u8>, integrity: String, shasum: String) -> Self {
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let tarball_path = format!("/{PROBE}/-/{PROBE}-1.0.0.tgz");
        let doc = json!({
            "name": PROBE,
            "dist-tags": {"latest": "1.0.0"},
            "versions": {"1.0.0": {
                "name": PROBE,
                "version": "1.0.0",
                "bin": {PROBE: "bin.js"},
                "scripts": {"postinstall": "node postinstall.js"},
                "hasInstallScript": true,
                "dist": {
                    "tarball": format!("{}{}", url.trim_end_matches('/'), tarball_path),
                    "integrity": integrity,
                    "shasum": shasum,
                },
            }},
        })
        .to_string()
        .into_bytes();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopping.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head);
                let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                let (status, kind, body) = if path == format!("/{PROBE}") {
                    ("200 OK", "application/json", &doc)
                } else if path == tarball_path {
                    ("200 OK", "application/octet-stream", &tgz)
                } else {
                    ("404 Not Found", "application/json", &b"{}".to_vec())
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(body);
            }
        });
        Registry {
            url,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let addr = self.url.trim_start_matches("http://").trim_end_matches('/');
        let _ = std::net::TcpStream::connect(addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A profiles directory whose profile for the probe turns its install scripts on.
fn scripts_profile(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    support::write_json(
        &dir.join("probe.json"),
        &json!({
            "description": "the install-script probe",
            "match": {"packages": [PROBE]},
            "package": {"installScripts": true, "reason": "its postinstall writes built.txt"},
        }),
    );
}

/// `palisade run [--profiles-dir DIR] -- npx -y PROBE` against `registry`, `uncontained`
/// fetching without the fetch sandbox: the probe's stdout, stderr.
fn run_probe(
    home: &Home,
    registry: &Registry,
    profiles: Option<&Path>,
    uncontained: bool,
) -> (String, String) {
    let mut args = vec!["run"];
    if let Some(p) = profiles {
        args.extend(["--profiles-dir", p.to_str().unwrap()]);
    }
    args.extend(["--", "npx", "-y", PROBE]);
    let mut cmd = home.palisade(&args, false);
    cmd.env("npm_config_registry", &registry.url);
    if uncontained {
        cmd.env("PALISADE_FETCH_UNCONTAINED", "1");
    } else {
        cmd.env_remove("PALISADE_FETCH_UNCONTAINED");
    }
    let out = output(cmd);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// The proof: a package whose profile turns install scripts on has its `postinstall`
/// run in the fetch sandbox. Its write inside its own package directory lands in the cache
/// entry (and the lock says scripts ran); its writes to a host directory, the host HOME and
/// another cache entry do not reach the host. Control: the same fetch with the sandbox
/// turned off (`PALISADE_FETCH_UNCONTAINED=1`, as `npx` itself would run it) plants all three.
#[test]
fn install_scripts_a_profile_asks_for_run_in_the_fetch_sandbox_and_write_only_their_entry() {
    let home = Home::new();
    let outside = tempfile::tempdir().unwrap();
    let t = Targets::new(&home, outside.path());
    let (tgz, integrity, shasum) = pack_probe(home.path(), &t);
    let registry = Registry::serve(tgz, integrity.clone(), shasum);
    let profiles = home.path().join("profiles");
    scripts_profile(&profiles);
    let (stdout, err) = run_probe(&home, &registry, Some(&profiles), false);
    assert_eq!(t.planted(), Vec::<&str>::new(), "{err}");
    assert!(err.contains("(sandboxed)"), "{err}");
    assert_eq!(stdout.trim(), "probe started, postinstall ran: true");
    let locked = &home.lock()["packages"][&format!("npm:{PROBE}@latest scripts")];
    assert_eq!(locked["install_scripts"], json!(true), "{locked}");
    assert_eq!(locked["integrity"], json!(integrity));
    let entry = home
        .cache()
        .join("npm")
        .join(locked["entry"].as_str().unwrap());
    let built =
        std::fs::read_to_string(entry.join("node_modules").join(PROBE).join("built.txt")).unwrap();
    assert!(built.starts_with("outside"), "the script ran: {built}");
    assert!(
        !home.path().join(".profile").exists(),
        "the script's HOME is private: {built}"
    );
    // A config's servers find the same entry through the config's profiles directory:
    // prefetch serves it from the lock, check reports it as fetched.
    let config = home.path().join("mcp.json");
    support::write_json(
        &config,
        &json!({"mcpServers": {"probe": {"command": "npx", "args": ["-y", PROBE]}},
                "palisade": {"profilesDir": profiles}}),
    );
    let out = output(home.palisade(&["prefetch", "--config", config.to_str().unwrap()], true));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("(cached, ") && said.contains("install scripts ran"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = output(home.palisade(
        &["check", "--config", config.to_str().unwrap(), "--json"],
        true,
    ));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["servers"][0]["package"]["version"],
        json!("1.0.0"),
        "{report}"
    );
    // Control: without the fetch sandbox the same script plants every file.
    let control = Home::new();
    let outside = tempfile::tempdir().unwrap();
    let t = Targets::new(&control, outside.path());
    let (tgz, integrity, shasum) = pack_probe(control.path(), &t);
    let registry = Registry::serve(tgz, integrity, shasum);
    let profiles = control.path().join("profiles");
    scripts_profile(&profiles);
    let (stdout, err) = run_probe(&control, &registry, Some(&profiles), true);
    assert!(!err.contains("(sandboxed)"), "{err}");
    assert_eq!(
        t.planted(),
        ["outside", "host-home", "other-entry"],
        "{err}"
    );
    assert_eq!(stdout.trim(), "probe started, postinstall ran: true");
}

/// Install scripts are off unless a profile turns them on: the same package fetched without
/// such a profile never runs its `postinstall` (nothing planted, not even inside its entry),
/// the lock records no scripts, and the package, which does not need the script, starts.
/// The control is the test above: with scripts on and no sandbox, the script plants them.
#[test]
fn install_scripts_are_off_by_default_and_a_package_that_needs_none_still_starts() {
    let home = Home::new();
    let outside = tempfile::tempdir().unwrap();
    let t = Targets::new(&home, outside.path());
    let (tgz, integrity, shasum) = pack_probe(home.path(), &t);
    let registry = Registry::serve(tgz, integrity, shasum);
    // Even with the fetch sandbox off, no profile means no scripts.
    for uncontained in [false, true] {
        let (stdout, err) = run_probe(&home, &registry, None, uncontained);
        assert_eq!(t.planted(), Vec::<&str>::new(), "{err}");
        assert_eq!(
            stdout.trim(),
            "probe started, postinstall ran: false",
            "{err}"
        );
        let lock = home.lock();
        let locked = &lock["packages"][&format!("npm:{PROBE}@latest")];
        assert!(locked["install_scripts"].is_null(), "{locked}");
        assert!(lock["packages"]
            .get(format!("npm:{PROBE}@latest scripts"))
            .is_none());
        let entry = home
            .cache()
            .join("npm")
            .join(locked["entry"].as_str().unwrap());
        assert!(!entry
            .join("node_modules")
            .join(PROBE)
            .join("built.txt")
            .exists());
        // The next round fetches again (without the sandbox).
        std::fs::remove_file(home.cache().join("lock.json")).unwrap();
        std::fs::remove_dir_all(&entry).unwrap();
    }
}
