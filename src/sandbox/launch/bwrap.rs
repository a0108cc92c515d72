//! The bubblewrap tier rendered and made a command: the spec's masks and write protection
//! as `bwrap::Render`, the seccomp program in a memfd the child inherits, the argv (under
//! `strace -f` for `--trace-denials`), and the command with its limits attached.
//!
//! The argv itself is rendered by the pure `sandbox::bwrap::render` (golden-tested there);
//! `strace_argv` is pure too. The effects here are the memfd, the cgroup (`limits`) and the
//! search for write-protected files (`protect`); nothing is spawned. Never: start bwrap with
//! palisade's environment (its own PID 1 would show it), or leave the seccomp descriptor to
//! any child but this one.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::limits;
use super::prepared::{argv_of, io, Enforcement, LaunchError, Prepared};
use super::protect::write_protected;
use super::request::LaunchRequest;
use crate::sandbox::bwrap::{self, Mask, Render};
use crate::sandbox::{deny_write, seccomp, sys, Access, SandboxSpec};

/// The bwrap command for `spec`.
pub(super) fn prepare(
    spec: &SandboxSpec,
    bwrap_path: &Path,
    req: &LaunchRequest,
    enforcement: Enforcement,
) -> Result<Prepared, LaunchError> {
    let mut held = Vec::new();
    let mut render = Render {
        seccomp_fd: None,
        masks: masks(&spec.deny, |p| p.is_dir()),
        write_protect: if req.write_protect {
            write_protected(&req.name, spec)
        } else {
            Vec::new()
        },
        pinned: Vec::new(),
    };
    // denyWrite holds whatever `protectDangerousFiles` says: the user named these paths.
    let denied = deny_write::protect(&spec.mounts, &req.deny_write)
        .map_err(|e| LaunchError::Invalid(format!("server `{}`: {e}", req.name)))?;
    render.write_protect.extend(denied);
    // Protected and masked paths, and read-only grants (one nested in a read-write grant
    // would otherwise be swapped for a directory the server wrote, by renaming its parent).
    let read_only = spec.mounts.iter().filter(|m| m.access == Access::Ro);
    let guarded = render
        .write_protect
        .iter()
        .map(PathBuf::as_path)
        .chain(render.masks.iter().map(Mask::path))
        .chain(read_only.map(|m| m.path.as_path()));
    // Only real directories can be pinned (a symlink there would be followed by bwrap).
    render.pinned = bwrap::pins_for(&spec.mounts, guarded)
        .into_iter()
        .filter(|d| std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()))
        .collect();
    if spec.seccomp {
        let prog = seccomp::program().map_err(|e| LaunchError::Refused {
            name: req.name.clone(),
            reasons: vec![e.to_string()],
        })?;
        let fd = sys::memfd_with(c"palisade-seccomp", &seccomp::to_bytes(&prog))
            .map_err(|e| io("cannot create the seccomp program's memfd", e))?;
        render.seccomp_fd = Some(sys::raw(&fd));
        held.push(fd);
    }
    let mut args = bwrap::render(spec, &render);
    let mut program = bwrap_path.to_path_buf();
    if let Some(log) = &req.trace_log {
        // strace outside the sandbox follows bwrap into it; the sandbox itself is unchanged.
        let strace = which::which("strace").map_err(|_| {
            LaunchError::Invalid(
                "--trace-denials needs strace (Debian/Ubuntu: apt install strace)".into(),
            )
        })?;
        args = strace_argv(log, bwrap_path, args);
        program = strace;
    }
    let mut cmd = std::process::Command::new(&program);
    cmd.args(&args).env_clear().envs(&spec.env);
    let attached = limits::attach(&mut cmd, &req.name, &spec.limits, render.seccomp_fd);
    Ok(Prepared {
        command: tokio::process::Command::from(cmd),
        enforcement,
        argv: argv_of(&program, args),
        held,
        files: Vec::new(),
        cgroup: attached.cgroup,
        task_watch: attached.task_watch,
        scratch: None,
        unforked: None,
    })
}

/// The denyRead paths as bwrap masks: an empty tmpfs over a directory, `/dev/null` over
/// anything else.
fn masks(deny: &[PathBuf], is_dir: impl Fn(&Path) -> bool) -> Vec<Mask> {
    deny.iter()
        .map(|p| {
            if is_dir(p) {
                Mask::Dir(p.clone())
            } else {
                Mask::File(p.clone())
            }
        })
        .collect()
}

/// strace's arguments to run `bwrap ARGS` and log its file and network calls to `log`.
/// `-I 1`: strace blocks fatal signals by default when it writes to a file, so a SIGTERM to
/// `palisade run --trace-denials` would leave it (and the sandbox) running.
fn strace_argv(log: &Path, bwrap_path: &Path, args: Vec<OsString>) -> Vec<OsString> {
    let mut wrapped: Vec<OsString> = [
        "-f",
        "-qq",
        "-I",
        "1",
        "-s",
        "512",
        "-e",
        "trace=%file,%network",
        "-o",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    wrapped.push(log.as_os_str().to_os_string());
    wrapped.push("--".into());
    wrapped.push(bwrap_path.as_os_str().to_os_string());
    wrapped.extend(args);
    wrapped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denied_directory_is_masked_as_one_and_anything_else_as_a_file() {
        let deny = [PathBuf::from("/home/u/.ssh"), PathBuf::from("/etc/shadow")];
        assert_eq!(
            masks(&deny, |p| p.ends_with(".ssh")),
            [
                Mask::Dir("/home/u/.ssh".into()),
                Mask::File("/etc/shadow".into())
            ]
        );
    }

    #[test]
    fn strace_runs_bwrap_with_its_arguments_unchanged() {
        let argv = strace_argv(
            Path::new("/tmp/trace.log"),
            Path::new("/usr/bin/bwrap"),
            vec!["--ro-bind".into(), "/usr".into(), "/usr".into()],
        );
        let shown: Vec<&str> = argv.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            shown,
            [
                "-f",
                "-qq",
                "-I",
                "1",
                "-s",
                "512",
                "-e",
                "trace=%file,%network",
                "-o",
                "/tmp/trace.log",
                "--",
                "/usr/bin/bwrap",
                "--ro-bind",
                "/usr",
                "/usr"
            ]
        );
    }
}
