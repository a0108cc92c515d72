//! A command run without a sandbox: the server opted out (`"sandbox": false`), or warn mode
//! found no tier that can contain it. It still starts from a clean environment (PATH, HOME,
//! LANG of palisade's, then the request's), inherits no descriptor but stdio, and gets the
//! per-process rlimits.
//!
//! Builds a command; spawns nothing. Never: used under enforce (`decide` refuses there), or
//! without the enforcement record saying the command is not contained.

use std::path::Path;

use super::host::HostEnv;
use super::limits::{fallback_rlimits, task_watch};
use super::prepared::{argv_of, Enforcement, Prepared};
use super::request::LaunchRequest;
use crate::sandbox::sys;

/// The uncontained command for `req`, running `program`.
pub(super) fn prepare(
    req: &LaunchRequest,
    program: &Path,
    host: &HostEnv,
    enforcement: Enforcement,
) -> Prepared {
    let mut cmd = std::process::Command::new(program);
    cmd.args(&req.args).env_clear().env("PATH", &host.path);
    if let Some(h) = &host.home {
        cmd.env("HOME", h);
    }
    if let Some(l) = &host.lang {
        cmd.env("LANG", l);
    }
    cmd.envs(&req.env);
    if let Some(c) = &req.cwd {
        cmd.current_dir(c);
    }
    sys::install_child_setup(&mut cmd, None, fallback_rlimits(&req.limits));
    Prepared {
        command: tokio::process::Command::from(cmd),
        enforcement,
        argv: argv_of(program, &req.args),
        held: Vec::new(),
        files: Vec::new(),
        cgroup: None,
        task_watch: task_watch(&req.limits, None),
        scratch: None,
        unforked: None,
    }
}
