//! The learn aid behind `palisade run --trace-denials`: reads an `strace -f` log of a
//! sandboxed run and reports what the sandbox refused, so a user can write a profile for an
//! unknown server. Pure: the caller says which paths exist on the host.
//!
//! What counts as refused, after the server's program was executed (bwrap's own setup is
//! skipped): a path that failed with ENOENT although it exists on the host (not mounted), a
//! path that failed with EACCES, EPERM or EROFS (not writable, masked), and a `connect` that
//! failed (no network, or the egress proxy's loopback only). Host names are not visible: DNS
//! cannot leave the sandbox, so the nameserver address shows up as a refused connect.
//! Never guesses: a failure it cannot parse is skipped, not reported.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// One refused thing, with how often and how it failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Denial {
    /// `read`, `write` or `connect`.
    pub kind: &'static str,
    /// A path, or `ADDRESS:PORT` for a connect.
    pub target: String,
    /// First failing syscall and errno, e.g. `openat ENOENT`.
    pub how: String,
    pub count: usize,
}

/// Errnos that mean "the sandbox said no" for a path that exists on the host.
const PATH_ERRNOS: &[&str] = &["EACCES", "EPERM", "EROFS"];

/// Syscalls that change the filesystem (a failure is a refused write).
const WRITE_CALLS: &[&str] = &[
    "mkdir",
    "mkdirat",
    "unlink",
    "unlinkat",
    "rmdir",
    "rename",
    "renameat",
    "renameat2",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "truncate",
    "chmod",
    "fchmodat",
    "chown",
    "fchownat",
    "utimensat",
    "creat",
    "mknod",
    "mknodat",
];

/// Parses `log` (strace `-f` output) for a run of `program`; `exists` answers for a path on
/// the host. Returns denials sorted by kind then target.
pub fn denials(log: &str, program: &Path, exists: impl Fn(&Path) -> bool) -> Vec<Denial> {
    let exec = format!("execve(\"{}\"", program.display());
    let mut started = false;
    let mut out: BTreeMap<(&'static str, String), Denial> = BTreeMap::new();
    for line in &joined(log) {
        let line = line.as_str();
        let call = line_call(line);
        if !started {
            // The server's own life starts at its successful execve.
            started = line.contains(&exec) && line.trim_end().ends_with("= 0");
            continue;
        }
        let Some((name, rest)) = call else { continue };
        let Some(errno) = failed_errno(rest) else {
            continue;
        };
        let found = if name == "connect" {
            connect_target(rest).map(|t| ("connect", t))
        } else {
            first_absolute_path(rest).and_then(|p| {
                let write = WRITE_CALLS.contains(&name) || opens_for_write(rest);
                let kind = if write { "write" } else { "read" };
                let refused =
                    PATH_ERRNOS.contains(&errno) || (errno == "ENOENT" && exists(Path::new(&p)));
                refused.then_some((kind, p))
            })
        };
        if let Some((kind, target)) = found {
            out.entry((kind, target.clone()))
                .and_modify(|d| d.count += 1)
                .or_insert(Denial {
                    kind,
                    target,
                    how: format!("{name} {errno}"),
                    count: 1,
                });
        }
    }
    out.into_values().collect()
}

/// The log with each call whole: with `-f`, strace splits a call interrupted by another
/// process into `PID name(args <unfinished ...>` and `PID <... name resumed>rest`.
fn joined(log: &str) -> Vec<String> {
    let mut pending: BTreeMap<&str, String> = BTreeMap::new();
    let mut out = Vec::new();
    for line in log.lines() {
        // strace pads short pids (`6660  openat(...`).
        let (pid, body) = line.split_once(' ').unwrap_or(("", line));
        let body = body.trim_start();
        if let Some(head) = body.strip_suffix(" <unfinished ...>") {
            pending.insert(pid, format!("{pid} {head}"));
        } else if body.starts_with("<... ") {
            let rest = body.split_once(" resumed>").map_or("", |(_, r)| r);
            if let Some(head) = pending.remove(pid) {
                out.push(format!("{head}{rest}"));
            }
        } else {
            out.push(line.to_string());
        }
    }
    out
}

/// `(syscall, everything after its opening parenthesis)` of an strace line (`PID name(...`).
fn line_call(line: &str) -> Option<(&str, &str)> {
    let body = line
        .split_once(' ')
        .filter(|(pid, _)| pid.chars().all(|c| c.is_ascii_digit()))
        .map_or(line, |(_, b)| b.trim_start());
    let (name, rest) = body.split_once('(')?;
    name.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_')
        .then_some((name, rest))
}

/// `ENOENT` from `... = -1 ENOENT (No such file or directory)`.
fn failed_errno(rest: &str) -> Option<&str> {
    let (_, tail) = rest.rsplit_once(" = -1 ")?;
    tail.split_whitespace().next()
}

/// The first quoted argument that is an absolute path (strace quotes path arguments).
fn first_absolute_path(rest: &str) -> Option<String> {
    let start = rest.find("\"/")?;
    let after = &rest[start + 1..];
    let end = after.find('"')?;
    let p = &after[..end];
    // strace escapes unusual bytes; such paths are skipped rather than misreported.
    (!p.contains('\\'))
        .then(|| crate::roots::canon::lexical_normalize(&PathBuf::from(p)))
        .map(|p| p.display().to_string())
}

fn opens_for_write(rest: &str) -> bool {
    ["O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC"]
        .iter()
        .any(|f| rest.contains(f))
}

/// `ADDR:PORT` (or a unix socket path) from a connect's sockaddr.
fn connect_target(rest: &str) -> Option<String> {
    if let Some(i) = rest.find("sun_path=\"") {
        let after = &rest[i + 10..];
        return after.find('"').map(|e| format!("unix:{}", &after[..e]));
    }
    let port = rest.split("htons(").nth(1)?.split(')').next()?.to_string();
    let addr = if let Some(a) = rest.split("inet_addr(\"").nth(1) {
        a.split('"').next()?.to_string()
    } else {
        let a = rest.split("inet_pton(AF_INET6, \"").nth(1)?;
        format!("[{}]", a.split('"').next()?)
    };
    Some(format!("{addr}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = r#"100 execve("/usr/bin/bwrap", ["bwrap"], 0x0 /* 3 vars */) = 0
100 openat(AT_FDCWD, "/root/.bashrc", O_RDONLY) = -1 ENOENT (No such file or directory)
101 execve("/usr/bin/node", ["node", "x.js"], 0x0 /* 4 vars */) = 0
101 openat(AT_FDCWD, "/usr/lib/nope.so", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)
101 openat(AT_FDCWD, "/root/.npmrc", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)
101 openat(AT_FDCWD, "/root/.npmrc", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)
101 openat(AT_FDCWD, "/opt/app/cache.json", O_WRONLY|O_CREAT|O_TRUNC, 0666) = -1 EROFS (Read-only file system)
101 mkdir("/srv/data", 0777) = -1 EACCES (Permission denied)
101 openat(AT_FDCWD, "/etc/hosts", O_RDONLY) = 3
101 connect(5, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.0.0.2")}, 16) = -1 ENETUNREACH (Network is unreachable)
101 connect(6, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "2001:db8::1", &sin6_addr), sin6_scope_id=0}, 28) = -1 ENETUNREACH (Network is unreachable)
101 connect(7, {sa_family=AF_UNIX, sun_path="/run/dbus/system_bus_socket"}, 110) = -1 ENOENT (No such file or directory)
101 +++ exited with 0 +++
"#;

    #[test]
    fn reports_what_the_sandbox_refused_after_the_program_started() {
        let host = |p: &Path| p == Path::new("/root/.npmrc") || p == Path::new("/root/.bashrc");
        let got = denials(LOG, Path::new("/usr/bin/node"), host);
        let shown: Vec<(&str, &str, &str, usize)> = got
            .iter()
            .map(|d| (d.kind, d.target.as_str(), d.how.as_str(), d.count))
            .collect();
        assert_eq!(
            shown,
            [
                ("connect", "10.0.0.2:53", "connect ENETUNREACH", 1),
                ("connect", "[2001:db8::1]:443", "connect ENETUNREACH", 1),
                (
                    "connect",
                    "unix:/run/dbus/system_bus_socket",
                    "connect ENOENT",
                    1
                ),
                // Missing on the host too: not a denial. bwrap's own .bashrc probe: skipped.
                ("read", "/root/.npmrc", "openat ENOENT", 2),
                ("write", "/opt/app/cache.json", "openat EROFS", 1),
                ("write", "/srv/data", "mkdir EACCES", 1),
            ]
        );
    }

    #[test]
    fn calls_split_by_other_processes_are_joined() {
        let log = "7 execve(\"/usr/bin/node\", [\"node\"], 0x0 /* 1 var */ <unfinished ...>\n\
                   8 openat(AT_FDCWD, \"/x\", O_RDONLY) = 3\n\
                   7 <... execve resumed>)             = 0\n\
                   7  openat(AT_FDCWD, \"/home/u/.npmrc\", O_RDONLY <unfinished ...>\n\
                   9 getpid() = 9\n\
                   7 <... openat resumed>) = -1 ENOENT (No such file or directory)\n";
        let got = denials(log, Path::new("/usr/bin/node"), |_| true);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].target, "/home/u/.npmrc");
    }

    #[test]
    fn nothing_is_reported_before_the_program_runs_or_for_other_programs() {
        assert!(denials(LOG, Path::new("/usr/bin/python3"), |_| true).is_empty());
    }
}
