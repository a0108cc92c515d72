//! "Approve and remember": the session-scoped allow a person may add when approving one
//! escalated call. A `RememberScope` names one server, one tool, the directories of the
//! approved call's path arguments (each read-only or read-write, as the call used it) and the
//! domains of its URL arguments. A later call of the same tool is approved without asking
//! only when every path it touches lies inside one of those directories with the access it
//! needs and every URL it names has one of those domains.
//!
//! Where it sits: the gateway builds a [`CallSubject`] for an escalated call (resolving paths
//! on the host, see `gateway::call::remembered`), offers [`RememberScope::offer`] to the approver
//! (shown in the request) and keeps accepted scopes in its session state. This module is pure:
//! no filesystem access, no clock, no global state.
//!
//! Never broader than what the person saw: no wildcard, no parent directory, no other tool or
//! server, no write where the approved call only read, no unresolved path or unparsable URL
//! (those never match), and no scope for a call with nothing to bound it (no path and no URL
//! argument), since remembering such a tool would approve any later use of it, nor for a call
//! with an argument whose role a scope cannot describe (an identifier, a recipient), since
//! the escalation may have been about that argument.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::roots::canon::is_within;
use crate::sandbox::Access;

/// One remembered directory: everything at or below `path`, for reading, or for reading and
/// writing when the approved call wrote there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RememberedDir {
    /// Canonical, absolute, never `/`.
    pub path: PathBuf,
    pub access: Access,
}

/// What an "approve and remember" adds to the session: shown in the request before the person
/// answers, written to the audit log when accepted and when it approves a later call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RememberScope {
    pub server: String,
    pub tool: String,
    /// The directories of the approved call's path arguments (deduplicated; rw wins).
    #[serde(default)]
    pub dirs: Vec<RememberedDir>,
    /// The domains of its URL arguments: a host, or `host/owner/repo` for git remotes.
    #[serde(default)]
    pub domains: Vec<String>,
}

/// One path argument of a call, resolved on the host by the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectPath {
    /// The canonical path (symlinks resolved, `..` collapsed); `None` when it could not be
    /// resolved (bad input, relative without a working directory, dangling symlink).
    pub canonical: Option<PathBuf>,
    /// The directory a widening would mount for it (the path itself when it is a directory,
    /// else its parent, existing or not: the widening creates it, never mounts an ancestor);
    /// `None` when that is `/`.
    pub dir: Option<PathBuf>,
    /// True when the argument may write, delete or rewrite history at the path.
    pub writes: bool,
}

/// What one call touches, as far as remembering is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSubject {
    pub server: String,
    pub tool: String,
    pub paths: Vec<SubjectPath>,
    /// The domain of each URL argument; `None` when the value does not parse to one.
    pub domains: Vec<Option<String>>,
    /// Arguments whose roles a scope cannot bound (identifiers such as a repository, opaque
    /// values such as a recipient a rule checks against a list). Any one of them rules out
    /// remembering: the escalation may have been about it.
    pub unscoped: Vec<String>,
}

impl CallSubject {
    /// True when nothing could bound a scope for this call: it names no path and no URL, or
    /// it carries an argument a scope cannot describe.
    fn unbounded(&self) -> bool {
        (self.paths.is_empty() && self.domains.is_empty()) || !self.unscoped.is_empty()
    }
}

impl RememberScope {
    /// The scope an approval of `subject` could remember, or `None` when remembering is not
    /// offered: some path or URL could not be resolved, a path has no directory but `/`, or
    /// the call names no path and no URL.
    pub fn offer(subject: &CallSubject) -> Option<RememberScope> {
        if subject.unbounded() {
            return None;
        }
        let mut dirs: Vec<RememberedDir> = Vec::new();
        for p in &subject.paths {
            p.canonical.as_ref()?;
            let dir = p.dir.clone()?;
            if dir == Path::new("/") || !dir.is_absolute() {
                return None;
            }
            let access = if p.writes { Access::Rw } else { Access::Ro };
            match dirs.iter_mut().find(|d| d.path == dir) {
                Some(d) => d.access = d.access.max(access),
                None => dirs.push(RememberedDir { path: dir, access }),
            }
        }
        let mut domains: Vec<String> = Vec::new();
        for d in &subject.domains {
            let d = d.clone()?;
            if d.is_empty() {
                return None;
            }
            if !domains.contains(&d) {
                domains.push(d);
            }
        }
        Some(RememberScope {
            server: subject.server.clone(),
            tool: subject.tool.clone(),
            dirs,
            domains,
        })
    }

    /// True when this scope approves `subject`: same server, same tool, at least one path or
    /// URL, every path resolved and inside a remembered directory that grants what it needs,
    /// every URL's domain equal to a remembered one.
    pub fn covers(&self, subject: &CallSubject) -> bool {
        if self.server != subject.server || self.tool != subject.tool || subject.unbounded() {
            return false;
        }
        let paths_ok = subject.paths.iter().all(|p| {
            let Some(canonical) = &p.canonical else {
                return false;
            };
            self.dirs.iter().any(|d| {
                d.path != Path::new("/")
                    && is_within(canonical, &d.path)
                    && (d.access == Access::Rw || !p.writes)
            })
        });
        let domains_ok = subject.domains.iter().all(|d| {
            d.as_ref()
                .is_some_and(|d| !d.is_empty() && self.domains.iter().any(|r| r == d))
        });
        paths_ok && domains_ok
    }

    /// One line for a person: what answering "approve and remember" would allow.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for d in &self.dirs {
            let how = match d.access {
                Access::Rw => "read-write",
                Access::Ro => "read-only",
            };
            parts.push(format!("in {} ({how})", d.path.display()));
        }
        for d in &self.domains {
            parts.push(format!("to {d}"));
        }
        format!(
            "every later call of {}/{} in this session whose paths and URLs all stay {}",
            self.server,
            self.tool,
            parts.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str, writes: bool) -> SubjectPath {
        let canonical = PathBuf::from(p);
        let dir = canonical.parent().map(Path::to_path_buf);
        SubjectPath {
            canonical: Some(canonical),
            dir,
            writes,
        }
    }

    fn subject(tool: &str, paths: Vec<SubjectPath>, domains: &[&str]) -> CallSubject {
        CallSubject {
            server: "fs".into(),
            tool: tool.into(),
            paths,
            domains: domains.iter().map(|d| Some(d.to_string())).collect(),
            unscoped: Vec::new(),
        }
    }

    fn write_scope() -> RememberScope {
        RememberScope::offer(&subject(
            "write_file",
            vec![path("/w/a/b/f.txt", true)],
            &[],
        ))
        .unwrap()
    }

    #[test]
    fn the_offer_is_the_directory_of_each_path_with_its_access() {
        let s = RememberScope::offer(&subject(
            "copy",
            vec![
                path("/w/src/x", false),
                path("/w/dst/y", true),
                path("/w/src/z", true),
            ],
            &["example.com", "example.com"],
        ))
        .unwrap();
        assert_eq!(
            s,
            RememberScope {
                server: "fs".into(),
                tool: "copy".into(),
                dirs: vec![
                    RememberedDir {
                        path: "/w/src".into(),
                        access: Access::Rw
                    },
                    RememberedDir {
                        path: "/w/dst".into(),
                        access: Access::Rw
                    },
                ],
                domains: vec!["example.com".into()],
            }
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(
            json["dirs"][0],
            serde_json::json!({"path": "/w/src", "access": "rw"})
        );
        assert_eq!(
            serde_json::from_value::<RememberScope>(json).unwrap(),
            s,
            "round-trips through a request file"
        );
    }

    #[test]
    fn nothing_is_offered_that_cannot_be_bounded() {
        // No path and no URL: remembering would approve any later use of the tool.
        assert_eq!(RememberScope::offer(&subject("ping", vec![], &[])), None);
        // An unresolvable path.
        let mut bad = path("/w/a/f", true);
        bad.canonical = None;
        assert_eq!(RememberScope::offer(&subject("w", vec![bad], &[])), None);
        // A path whose directory would be `/`.
        assert_eq!(
            RememberScope::offer(&subject("w", vec![path("/etcfile", true)], &[])),
            None
        );
        let mut no_dir = path("/w/f", true);
        no_dir.dir = None;
        assert_eq!(RememberScope::offer(&subject("w", vec![no_dir], &[])), None);
        // A URL without a domain.
        let mut s = subject("fetch", vec![], &[]);
        s.domains.push(None);
        assert_eq!(RememberScope::offer(&s), None);
        // An argument a scope cannot describe (say, the recipient a rule checks).
        let mut s = subject("send", vec![path("/w/a/f", false)], &[]);
        s.unscoped.push("to".into());
        assert_eq!(RememberScope::offer(&s), None);
    }

    #[test]
    fn an_unscoped_argument_is_never_covered() {
        // The scope was remembered for attachments in /w/a; a later call that also names a
        // recipient (which the policy may have escalated on) is not covered.
        let scope =
            RememberScope::offer(&subject("send", vec![path("/w/a/f", false)], &[])).unwrap();
        let mut later = subject("send", vec![path("/w/a/g", false)], &[]);
        assert!(scope.covers(&later));
        later.unscoped.push("to".into());
        assert!(!scope.covers(&later));
    }

    #[test]
    fn same_tool_inside_the_directory_matches() {
        let scope = write_scope();
        for p in [
            "/w/a/b/f.txt",
            "/w/a/b/other.txt",
            "/w/a/b/deeper/x",
            "/w/a/b",
        ] {
            assert!(
                scope.covers(&subject("write_file", vec![path(p, true)], &[])),
                "{p}"
            );
        }
        // Reading where writing was approved is narrower: covered.
        assert!(scope.covers(&subject("write_file", vec![path("/w/a/b/r", false)], &[])));
    }

    #[test]
    fn never_broader_parent_sibling_prefix_tool_server() {
        let scope = write_scope();
        let miss = |s: CallSubject| assert!(!scope.covers(&s), "{s:?}");
        miss(subject("write_file", vec![path("/w/a/f.txt", true)], &[])); // parent
        miss(subject("write_file", vec![path("/w/a", true)], &[])); // the parent itself
        miss(subject("write_file", vec![path("/w/a/c/f.txt", true)], &[])); // sibling
        miss(subject(
            "write_file",
            vec![path("/w/a/bc/f.txt", true)],
            &[],
        )); // prefix trick
        miss(subject("write_file", vec![path("/w/a/b.txt", true)], &[])); // prefix trick
        miss(subject("edit_file", vec![path("/w/a/b/f.txt", true)], &[])); // other tool
        let mut other_server = subject("write_file", vec![path("/w/a/b/f.txt", true)], &[]);
        other_server.server = "fs2".into();
        miss(other_server);
        // One path inside and one outside: not covered.
        miss(subject(
            "write_file",
            vec![path("/w/a/b/f.txt", true), path("/etc/passwd", true)],
            &[],
        ));
        // An unresolved path never matches, even with a plausible-looking directory.
        let mut unresolved = path("/w/a/b/f.txt", true);
        unresolved.canonical = None;
        miss(subject("write_file", vec![unresolved], &[]));
        // No path at all: nothing to compare, never covered.
        miss(subject("write_file", vec![], &[]));
        // A URL the scope never saw.
        miss(subject(
            "write_file",
            vec![path("/w/a/b/f.txt", true)],
            &["example.com"],
        ));
    }

    #[test]
    fn a_read_never_grants_a_write() {
        let scope =
            RememberScope::offer(&subject("git", vec![path("/w/repo/x", false)], &[])).unwrap();
        assert!(scope.covers(&subject("git", vec![path("/w/repo/y", false)], &[])));
        assert!(!scope.covers(&subject("git", vec![path("/w/repo/y", true)], &[])));
    }

    #[test]
    fn domains_match_exactly() {
        let scope = RememberScope::offer(&subject("fetch", vec![], &["docs.rs"])).unwrap();
        assert!(scope.covers(&subject("fetch", vec![], &["docs.rs"])));
        for d in ["evil.docs.rs", "docs.rs.evil", "rs", "crates.io", ""] {
            assert!(!scope.covers(&subject("fetch", vec![], &[d])), "{d}");
        }
        assert!(!scope.covers(&subject("fetch", vec![], &["docs.rs", "crates.io"])));
        let mut unparsed = subject("fetch", vec![], &[]);
        unparsed.domains.push(None);
        assert!(!scope.covers(&unparsed));
        // A path argument where the approved call had only URLs: no directory covers it.
        assert!(!scope.covers(&subject("fetch", vec![path("/w/x", false)], &["docs.rs"])));
    }

    #[test]
    fn a_hand_made_scope_of_slash_matches_nothing() {
        let scope = RememberScope {
            server: "fs".into(),
            tool: "write_file".into(),
            dirs: vec![RememberedDir {
                path: "/".into(),
                access: Access::Rw,
            }],
            domains: vec![],
        };
        assert!(!scope.covers(&subject("write_file", vec![path("/etc/x", true)], &[])));
    }

    #[test]
    fn the_description_names_tool_directories_and_access() {
        let d = write_scope().describe();
        assert!(
            d.contains("fs/write_file") && d.contains("in /w/a/b (read-write)"),
            "{d}"
        );
    }
}
