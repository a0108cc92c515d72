//! Facts about the request's grants, checked before anything starts: each exists, is
//! readable (and writable when read-write) by palisade, is not broader than allowed, and is
//! not granted twice with different access. Returns them as canonical mounts.
//!
//! Reads the filesystem (metadata, canonical paths, access); never creates or changes
//! anything. Never: let a grant of `/` or a read-write home through without `allow_broad`.

use std::path::Path;

use super::prepared::{io, LaunchError};
use super::request::LaunchRequest;
use crate::sandbox::{Access, Mount, MountOrigin};

/// A directory no one should get read-write (or `/` at all) by accident.
fn is_broad_grant(path: &Path, home: Option<&Path>) -> bool {
    path == Path::new("/")
        || path == Path::new("/root")
        || path == Path::new("/home")
        || path.parent() == Some(Path::new("/home"))
        || home.is_some_and(|h| std::fs::canonicalize(h).map_or_else(|_| h == path, |h| h == path))
}

/// Checks every grant before anything starts: it exists, is readable, is not broader than
/// allowed, and is not granted twice with different access. Returns canonical mounts.
pub(super) fn validate_grants(
    req: &LaunchRequest,
    home: Option<&Path>,
) -> Result<Vec<Mount>, LaunchError> {
    let mut mounts: Vec<Mount> = Vec::new();
    for g in &req.grants {
        let shown = g.path.display();
        if !g.path.is_absolute() {
            return Err(LaunchError::Invalid(format!(
                "grant {shown} is not an absolute path; give the full path"
            )));
        }
        let meta = std::fs::metadata(&g.path).map_err(|e| {
            LaunchError::Invalid(match e.kind() {
                std::io::ErrorKind::NotFound => {
                    format!("grant {shown} does not exist; create it first or fix the path")
                }
                _ => format!("grant {shown} cannot be accessed ({e}); fix its permissions"),
            })
        })?;
        let real = std::fs::canonicalize(&g.path)
            .map_err(|e| io(&format!("cannot canonicalise grant {shown}"), e))?;
        if req.grants_canonical && real != g.path {
            return Err(LaunchError::Invalid(format!(
                "root {shown} now resolves to {} (a directory on its way became a symlink \
                 since it was granted: moved by you, or swapped by a server that can write \
                 there); refusing to mount it: restore the directory, or restart palisade to \
                 take the new layout",
                real.display()
            )));
        }
        let mode = if meta.is_dir() {
            nix::unistd::AccessFlags::R_OK | nix::unistd::AccessFlags::X_OK
        } else {
            nix::unistd::AccessFlags::R_OK
        };
        if nix::unistd::access(&real, mode).is_err() {
            return Err(LaunchError::Invalid(format!(
                "grant {shown} is not readable by palisade; fix its permissions"
            )));
        }
        if g.access == Access::Rw
            && nix::unistd::access(&real, nix::unistd::AccessFlags::W_OK).is_err()
        {
            return Err(LaunchError::Invalid(format!(
                "grant {shown} is not writable by palisade; grant it read-only (--ro) or fix its permissions"
            )));
        }
        if !req.allow_broad {
            if real == Path::new("/") {
                return Err(LaunchError::Invalid(
                    "refusing to grant / (the whole filesystem, /etc/shadow and every home included); \
                     grant the directories the command needs, or pass --allow-broad"
                        .into(),
                ));
            }
            if g.access == Access::Rw && is_broad_grant(&real, home) {
                return Err(LaunchError::Invalid(format!(
                    "refusing read-write grant of {} (a home directory); grant a narrower directory, or pass --allow-broad",
                    real.display()
                )));
            }
        }
        if let Some(prev) = mounts.iter().find(|m| m.path == real) {
            if prev.access != g.access {
                return Err(LaunchError::Invalid(format!(
                    "{} is granted both read-only and read-write; keep one of --ro/--rw",
                    real.display()
                )));
            }
            continue;
        }
        mounts.push(Mount {
            path: real,
            access: g.access,
            origin: MountOrigin::Root,
        });
    }
    Ok(mounts)
}

#[cfg(test)]
mod tests {
    use super::super::request::Grant;
    use super::*;

    // Adversarial review of stop 43: a server that can write `proj` renames `proj/vendor`
    // and plants `proj/vendor/lib` as a symlink to a secret directory; bwrap re-resolved the
    // recorded root at the next launch and mounted the secret where the root was announced.
    #[test]
    fn a_recorded_root_that_now_resolves_elsewhere_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let root = base.join("proj/vendor/lib");
        std::fs::create_dir_all(&root).unwrap();
        let secret = base.join("secret");
        std::fs::create_dir(&secret).unwrap();
        let req = |canonical| LaunchRequest {
            grants: vec![Grant {
                path: root.clone(),
                access: Access::Ro,
            }],
            grants_canonical: canonical,
            ..LaunchRequest::default()
        };
        assert_eq!(validate_grants(&req(true), None).unwrap()[0].path, root);
        std::fs::rename(base.join("proj/vendor"), base.join("proj/vendor.old")).unwrap();
        std::fs::create_dir(base.join("proj/vendor")).unwrap();
        std::os::unix::fs::symlink(&secret, &root).unwrap();
        let refused = validate_grants(&req(true), None).unwrap_err().to_string();
        assert!(refused.contains("now resolves to"), "{refused}");
        // `palisade run`'s grants are the user's paths, which may be links: followed.
        assert_eq!(validate_grants(&req(false), None).unwrap()[0].path, secret);
    }
}
