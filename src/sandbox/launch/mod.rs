//! The only part of `sandbox` that starts processes. The gateway and `palisade run` both
//! call `prepare`, which resolves enforce/warn against the machine, builds the spec, renders
//! it, and returns a command ready to spawn plus the record of what is enforced.
//!
//! One launch, in the order `prepare_with` reads:
//! - facts gathered (I/O, nothing created but a profile's state directory): the profile
//!   (`profile`), palisade's own environment (`host`), the grants (`grants`), the program;
//! - the plan (pure, unit-tested): needs, resolution and the decision with its enforcement
//!   record (`decide`);
//! - the spec, the one set every tier renders (`spec`, reading the filesystem; `protect`
//!   finds the write-protected files in it);
//! - rendering and the command, one module per tier: `bwrap` (argv, seccomp memfd),
//!   `landlock` (ruleset, filter, private `scratch` HOME/TMPDIR), srt (`sandbox::srt`), or
//!   `direct` for an uncontained run, each with its `limits` attached;
//! - what comes back (`prepared`): the command, the descriptors and directories it needs,
//!   and the enforcement record.
//!
//! Every command built here starts from an empty environment and inherits no descriptor but
//! stdio (and the seccomp program, which bwrap reads and closes). Never: spawn (the caller
//! does, holding `Prepared` until the child is reaped), or run a command less contained than
//! its enforcement record says.

mod bwrap;
mod decide;
mod direct;
mod grants;
mod host;
mod landlock;
mod limits;
mod prepared;
mod profile;
mod protect;
mod request;
mod scratch;
mod spec;

use std::borrow::Cow;

pub use decide::{needs, needs_loopback_endpoint, resolution};
pub use host::HostEnv;
pub use landlock::{LANDLOCK_NOT_ENFORCED, LANDLOCK_PROXY_NOT_ENFORCED};
pub use prepared::{Enforcement, LaunchError, Prepared};
pub use profile::{profile_for, state_dir_for};
pub use request::{EgressSocket, Grant, LaunchRequest};
pub use scratch::Scratch;

pub use super::write_protect::WRITE_PROTECTED;

use super::capabilities::{self, Capabilities, Depth};
use super::closure::{self, Lookup};
use super::resolve;
use decide::Decision;
use prepared::io;
use spec::SpecInputs;

/// Resolves, builds and renders the sandbox for `req`, probing the machine fully first.
/// Callers that launch many servers probe once and call `prepare_with`.
pub fn prepare(req: &LaunchRequest) -> Result<Prepared, LaunchError> {
    prepare_with(req, &capabilities::probe(Depth::Full))
}

/// `req` with its interpreter's relative script argument made absolute (see
/// `closure::absolute_script`).
fn with_absolute_script<'a>(
    req: Cow<'a, LaunchRequest>,
    program: &std::path::Path,
    cwd: &std::path::Path,
) -> Cow<'a, LaunchRequest> {
    match closure::absolute_script(program, &req.args, cwd) {
        Some(abs) => {
            let mut owned = req.into_owned();
            if let Some(first) = owned.args.first_mut() {
                *first = abs;
            }
            Cow::Owned(owned)
        }
        None => req,
    }
}

/// `prepare` with capabilities probed by the caller.
pub fn prepare_with(req: &LaunchRequest, caps: &Capabilities) -> Result<Prepared, LaunchError> {
    if req.command.trim().is_empty() {
        return Err(LaunchError::Invalid(
            "no command given: put the command and its arguments after `--`".into(),
        ));
    }
    // Facts: the profile, the host's environment, the grants, the program.
    let host = HostEnv::current();
    let profiled = match profile_for(req, &host)? {
        Some((selected, plan)) => Some(profile::with_profile(req, &selected, &plan)?),
        None => None,
    };
    let (req, profile_mounts, share_pid) = match &profiled {
        Some(p) => (&p.req, p.mounts.clone(), p.share_pid),
        None => (req, Vec::new(), false),
    };
    let grants = grants::validate_grants(req, host.home.as_deref())?;
    let env = host::sandbox_env(req, &host)?;
    let path_var = env.get("PATH").cloned().unwrap_or_default();
    let lookup_cwd = match &req.cwd {
        Some(c) => c.clone(),
        None => std::env::current_dir().map_err(|e| io("cannot read the current directory", e))?,
    };
    // What the server can write: a closure input there is not followed out of the grants.
    let writable = closure::Writable::new(
        grants
            .iter()
            .chain(&profile_mounts)
            .map(|m| (m.path.clone(), m.access == crate::sandbox::Access::Rw)),
        req.deny_write
            .iter()
            .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())),
    );
    let lookup = Lookup {
        path_var: &path_var,
        cwd: &lookup_cwd,
        home: host.home.as_deref(),
        grants: Some(&writable),
    };
    let program = closure::resolve_program(&req.command, &lookup)?;

    // The plan.
    let req: Cow<'_, LaunchRequest> = decide::with_egress_fallback(req);
    let req = with_absolute_script(req, &program, &lookup_cwd);
    let (plan, enforcement) = match decide::decide(&req.name, resolution(&req, caps)) {
        Decision::Refuse(refused) => return Err(refused),
        Decision::Direct(enforcement) => {
            return Ok(direct::prepare(&req, &program, &host, enforcement))
        }
        Decision::Contain { plan, enforcement } => (plan, enforcement),
    };
    // The tier that renders it. resolve only plans bwrap (and srt, which runs it) when it was
    // found; fail closed if that ever changes.
    let tier = match (&caps.bwrap, plan.landlock, plan.srt) {
        (_, true, _) => Tier::Landlock,
        (Some(_), false, true) => Tier::Srt,
        (Some(info), false, false) => Tier::Bwrap(info.path.as_path()),
        (None, false, _) => {
            return Err(LaunchError::Refused {
                name: req.name.clone(),
                reasons: vec!["bubblewrap is not available".into()],
            })
        }
    };

    // The spec, then the tier's rendering.
    let mut spec = spec::build_spec(
        &req,
        SpecInputs {
            program: &program,
            grants,
            profile_mounts,
            env,
            lookup: &lookup,
        },
        &plan,
        caps,
    )?;
    match tier {
        Tier::Landlock => {
            let why = resolve::tier(caps, req.backend).1;
            landlock::prepare(&spec, &req, enforcement, caps, &why)
        }
        Tier::Srt => {
            spec.share_pid = share_pid;
            // srt does not keep the write-protected files found in read-write grants
            // read-only on its own (tests/attacks/serve.rs, srt column): name them as denyWrite.
            let mut req = req.into_owned();
            if req.write_protect {
                req.deny_write
                    .extend(protect::write_protected(&req.name, &spec));
            }
            super::srt::prepare(&spec, &req, caps, enforcement)
        }
        Tier::Bwrap(bwrap_path) => {
            spec.share_pid = share_pid;
            bwrap::prepare(&spec, bwrap_path, &req, enforcement)
        }
    }
}

/// The tier that renders a contained launch.
enum Tier<'a> {
    Landlock,
    Srt,
    /// Palisade's own bubblewrap sandbox, with bwrap's path.
    Bwrap(&'a std::path::Path),
}
