//! The session's remembered approvals ("approve and remember") and the host-side resolution
//! they are matched on. Sits in the pipeline's approval stage: for a call the policy
//! escalated, [`subject`] resolves what it touches (paths canonicalised with the roots
//! helpers, the same directories a widening would mount; URLs reduced to their domains), a
//! remembered scope that covers it approves it without asking, and otherwise the scope it
//! would offer (`RememberScope::offer`) goes into the request.
//!
//! The scopes live in the gateway's `Shared` state of one `serve` run: never persisted, gone
//! when it exits. Never: consult them for anything but an `escalate` verdict (a `deny` is
//! final), or treat a path that cannot be resolved as covered.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::approval::{CallSubject, RememberScope, SubjectPath};
use crate::gateway::server::roots::directory_for;
use crate::policy::{domains, PathArg, Role};
use crate::roots::canon::{self, Base};
use crate::roots::guard::normalize_input;

/// More scopes than this in one session is not a person remembering approvals; the oldest
/// is dropped (it only means being asked again).
const MAX_SCOPES: usize = 256;

/// The scopes remembered in this session.
#[derive(Debug, Default)]
pub struct Remembered {
    /// A std lock around plain data, never held across an await.
    scopes: Mutex<Vec<RememberScope>>,
}

impl Remembered {
    /// The first remembered scope that covers `subject`.
    pub fn find(&self, subject: &CallSubject) -> Option<RememberScope> {
        self.scopes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|s| s.covers(subject))
            .cloned()
    }

    /// Remembers `scope` for the rest of the session.
    pub fn add(&self, scope: RememberScope) {
        let mut scopes = self.scopes.lock().unwrap_or_else(|e| e.into_inner());
        if scopes.contains(&scope) {
            return;
        }
        if scopes.len() >= MAX_SCOPES {
            let dropped = scopes.remove(0);
            tracing::warn!(
                "more than {MAX_SCOPES} remembered approvals; forgetting the oldest ({}/{})",
                dropped.server,
                dropped.tool
            );
        }
        tracing::info!(
            server = %scope.server, tool = %scope.tool,
            "remembered for this session: {}", scope.describe()
        );
        scopes.push(scope);
    }

    pub fn len(&self) -> usize {
        self.scopes.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The arguments of one escalated call, as the policy reads them (`None`: the policy does
/// not know the tool).
pub struct CallArgs<'c, 'a> {
    pub paths: Option<&'c [PathArg<'a>]>,
    pub urls: Option<&'c [(&'a str, Role)]>,
    pub unscoped: Option<&'c [&'a str]>,
}

/// What an escalated call touches, resolved on the host. `None` when the policy does not
/// know the tool's arguments (nothing can be remembered or matched then).
pub fn subject(
    server: &str,
    tool: &str,
    args: &CallArgs<'_, '_>,
    cwd: Option<&Path>,
    home: Option<&Path>,
) -> Option<CallSubject> {
    let base = Base { cwd, home };
    let (paths, urls) = (args.paths, args.urls);
    let unscoped = args.unscoped?.iter().map(|s| s.to_string()).collect();
    let paths = paths?
        .iter()
        .map(|a| {
            let canonical = resolve_strict(a.value, &base);
            let dir = canonical.as_deref().and_then(directory_for);
            SubjectPath {
                canonical,
                dir,
                writes: a.writes(),
            }
        })
        .collect();
    let domains = urls?.iter().map(|(v, role)| domain_of(v, *role)).collect();
    Some(CallSubject {
        server: server.to_string(),
        tool: tool.to_string(),
        paths,
        domains,
        unscoped,
    })
}

/// Canonicalises like the roots check (`~`, relative, `..`, `file://`, symlinks through the
/// deepest existing ancestor), and refuses what that leaves ambiguous: when the deepest
/// existing entry is a symlink that does not resolve (dangling), the path's real target is
/// unknown, so it is not resolved at all.
pub fn resolve_strict(raw: &str, base: &Base<'_>) -> Option<PathBuf> {
    let normal = normalize_input(raw, base).ok()?;
    let deepest = normal
        .ancestors()
        .find(|a| std::fs::symlink_metadata(a).is_ok())?;
    if std::fs::symlink_metadata(deepest).ok()?.is_symlink()
        && std::fs::canonicalize(deepest).is_err()
    {
        return None;
    }
    Some(canon::resolve_existing_prefix(&normal))
}

/// The domain a URL argument is matched by: its host (lowercase, as the WHATWG parser gives
/// it) for `fetch-url`, `host/owner/repo` for `git-remote-url`. `None` when the value does not
/// parse to one.
pub fn domain_of(value: &str, role: Role) -> Option<String> {
    if role == Role::GitRemoteUrl {
        let d = domains::domain_for(value, role);
        // `domain_for` returns an unparsable value unchanged.
        return (d != value && !d.is_empty() && !d.starts_with('/')).then_some(d);
    }
    let url = url::Url::parse(value).ok()?;
    let host = url.host_str()?;
    (!host.is_empty()).then(|| host.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Tree {
        _t: tempfile::TempDir,
        root: PathBuf,
    }

    /// root/{a/b/f.txt, a/bc/g.txt, a/c/, outside/secret, a/b/link -> outside,
    ///       a/b/dangling -> outside/new}
    fn tree() -> Tree {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        for d in ["a/b", "a/bc", "a/c", "outside"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("a/b/f.txt"), "f").unwrap();
        std::fs::write(root.join("a/bc/g.txt"), "g").unwrap();
        std::fs::write(root.join("outside/secret"), "s").unwrap();
        symlink(root.join("outside"), root.join("a/b/link")).unwrap();
        symlink(root.join("outside/new"), root.join("a/b/dangling")).unwrap();
        Tree { _t: t, root }
    }

    fn write(v: &str) -> PathArg<'_> {
        PathArg {
            value: v,
            roles: vec![Role::WritePath],
        }
    }

    fn args<'c, 'a>(paths: &'c [PathArg<'a>], urls: &'c [(&'a str, Role)]) -> CallArgs<'c, 'a> {
        CallArgs {
            paths: Some(paths),
            urls: Some(urls),
            unscoped: Some(&[]),
        }
    }

    fn subj(tool: &str, paths: &[PathArg<'_>], cwd: Option<&Path>) -> CallSubject {
        subject("fs", tool, &args(paths, &[]), cwd, None).unwrap()
    }

    /// The scope "approve and remember" offers for a write to root/a/b/f.txt.
    fn scope(t: &Tree) -> RememberScope {
        let f = t.root.join("a/b/f.txt").display().to_string();
        RememberScope::offer(&subj("write_file", &[write(&f)], None)).unwrap()
    }

    fn covered(scope: &RememberScope, tool: &str, raw: &str, cwd: Option<&Path>) -> bool {
        scope.covers(&subj(tool, &[write(raw)], cwd))
    }

    #[test]
    fn the_offer_is_the_directory_the_widening_mounts() {
        let t = tree();
        let s = scope(&t);
        assert_eq!(s.dirs.len(), 1);
        assert_eq!(s.dirs[0].path, t.root.join("a/b"));
        assert_eq!(s.dirs[0].access, crate::sandbox::Access::Rw);
        // A directory argument is its own directory; a file in a new subtree gets its own
        // (missing) directory, as `widen::needed` does, never an existing ancestor.
        let d = t.root.join("a/c").display().to_string();
        let n = t.root.join("a/c/new/deeper/x").display().to_string();
        let s2 = RememberScope::offer(&subj("w", &[write(&d), write(&n)], None)).unwrap();
        assert_eq!(
            s2.dirs.iter().map(|d| d.path.clone()).collect::<Vec<_>>(),
            [t.root.join("a/c"), t.root.join("a/c/new/deeper")]
        );
    }

    #[test]
    fn later_calls_in_the_directory_match_after_resolution() {
        let t = tree();
        let s = scope(&t);
        let r = |p: &str| t.root.join(p).display().to_string();
        assert!(covered(&s, "write_file", &r("a/b/new.txt"), None));
        assert!(covered(&s, "write_file", &r("a/b/sub/new.txt"), None));
        // `..` that stays inside, a file:// URI and a relative path with the server's cwd.
        assert!(covered(&s, "write_file", &r("a/c/../b/x"), None));
        assert!(covered(
            &s,
            "write_file",
            &format!("file://{}", r("a/b/u.txt")),
            None
        ));
        assert!(covered(
            &s,
            "write_file",
            "b/rel.txt",
            Some(&t.root.join("a"))
        ));
    }

    #[test]
    fn escapes_never_match() {
        let t = tree();
        let s = scope(&t);
        let r = |p: &str| t.root.join(p).display().to_string();
        // `..` out of the directory.
        assert!(!covered(&s, "write_file", &r("a/b/../c/x"), None));
        assert!(!covered(
            &s,
            "write_file",
            &r("a/b/../../outside/secret"),
            None
        ));
        // A symlink inside the directory pointing out of it, existing or not yet.
        assert!(!covered(&s, "write_file", &r("a/b/link/secret"), None));
        assert!(!covered(&s, "write_file", &r("a/b/link/new"), None));
        // A dangling symlink: where a write would land is not known, so never covered.
        assert!(!covered(&s, "write_file", &r("a/b/dangling"), None));
        // Prefix tricks: a/bc is not inside a/b.
        assert!(!covered(&s, "write_file", &r("a/bc/g.txt"), None));
        assert!(!covered(
            &s,
            "write_file",
            &format!("{}c/g.txt", r("a/b")),
            None
        ));
        // Parent and sibling.
        assert!(!covered(&s, "write_file", &r("a/x.txt"), None));
        assert!(!covered(&s, "write_file", &r("a/c/x.txt"), None));
        // Unresolvable: relative without a cwd, `~` without a home, NUL, encoded separators.
        assert!(!covered(&s, "write_file", "b/rel.txt", None));
        assert!(!covered(&s, "write_file", "~/x", None));
        assert!(!covered(
            &s,
            "write_file",
            &format!("{}\0x", r("a/b/")),
            None
        ));
        assert!(!covered(&s, "write_file", &r("a/b/..%2f..%2fx"), None));
        // Another tool, same path.
        assert!(!covered(&s, "edit_file", &r("a/b/f.txt"), None));
    }

    #[test]
    fn a_dangling_symlink_is_never_offered() {
        let t = tree();
        let d = t.root.join("a/b/dangling").display().to_string();
        assert_eq!(resolve_strict(&d, &Base::default()), None);
        assert_eq!(
            RememberScope::offer(&subj("write_file", &[write(&d)], None)),
            None
        );
        // A symlink that resolves is followed to where it points.
        let l = t.root.join("a/b/link/secret").display().to_string();
        assert_eq!(
            resolve_strict(&l, &Base::default()),
            Some(t.root.join("outside/secret"))
        );
    }

    #[test]
    fn unknown_tools_give_no_subject_and_domains_are_hosts() {
        let unknown = |a: CallArgs<'_, '_>| subject("fs", "x", &a, None, None);
        assert_eq!(
            unknown(CallArgs {
                paths: None,
                ..args(&[], &[])
            }),
            None
        );
        assert_eq!(
            unknown(CallArgs {
                urls: None,
                ..args(&[], &[])
            }),
            None
        );
        assert_eq!(
            unknown(CallArgs {
                unscoped: None,
                ..args(&[], &[])
            }),
            None
        );
        assert_eq!(
            domain_of("https://Docs.RS:8443/a?b", Role::FetchUrl).as_deref(),
            Some("docs.rs")
        );
        assert_eq!(domain_of("not a url", Role::FetchUrl), None);
        assert_eq!(domain_of("file:///etc/passwd", Role::FetchUrl), None);
        assert_eq!(
            domain_of("git@github.com:o/r.git", Role::GitRemoteUrl).as_deref(),
            Some("github.com/o/r")
        );
        assert_eq!(domain_of("nonsense", Role::GitRemoteUrl), None);
        let urls = [("https://docs.rs/x", Role::FetchUrl)];
        let s = subject("web", "fetch", &args(&[], &urls), None, None).unwrap();
        let scope = RememberScope::offer(&s).unwrap();
        assert_eq!(scope.domains, ["docs.rs"]);
        let other = [("https://docs.rs.evil.example/x", Role::FetchUrl)];
        let s2 = subject("web", "fetch", &args(&[], &other), None, None).unwrap();
        assert!(!scope.covers(&s2));
    }

    #[test]
    fn the_session_store_finds_and_deduplicates() {
        let t = tree();
        let store = Remembered::default();
        assert!(store.is_empty());
        store.add(scope(&t));
        store.add(scope(&t));
        assert_eq!(store.len(), 1);
        let inside = t.root.join("a/b/z").display().to_string();
        let outside = t.root.join("a/c/z").display().to_string();
        assert!(store
            .find(&subj("write_file", &[write(&inside)], None))
            .is_some());
        assert!(store
            .find(&subj("write_file", &[write(&outside)], None))
            .is_none());
    }
}
