//! The `[SANDBOX BLOCKED]` classifier: the "annotate" stage of the call pipeline.
//!
//! Pure: text in, verdict out. It decides whether a downstream error message (a JSON-RPC
//! error's message, or the text of an `isError: true` result) looks like the sandbox refused
//! the operation, and if so builds the prefix the agent sees: what was blocked and which grant
//! would allow it. It never runs for a server that is not really sandboxed (unsandboxed,
//! opted out or degraded): an EACCES there is the host's answer, not ours, and blaming the
//! sandbox would send the user to change the wrong setting.
//!
//! Never an oracle: the text it reads was written by a server, and a tool may echo what the
//! agent planted (`ENOENT … open '/root/.ssh/x'`). So it never looks a path from the text up
//! on the host, and it names a path (and the grant that would allow it) only when Palisade
//! knows that path for its own reasons: it lies within the call's own path arguments, the
//! server's grants, or its denyRead / denyWrite lists. Any other path is left out of the
//! explanation; the answer is then the same whether or not the host has it.

use std::path::{Path, PathBuf};

/// The marker every sandbox-caused error starts with.
pub const MARKER: &str = "[SANDBOX BLOCKED]";

/// What the classifier knows about the server whose error it reads.
#[derive(Debug, Clone)]
pub struct BlockContext<'a> {
    pub server: &'a str,
    /// True only when the server runs under `Enforcement::Sandboxed`.
    pub sandboxed: bool,
    /// True when the server has an egress allowlist (some network is allowed).
    pub egress_allowed: bool,
    /// Paths the sandbox denies reading even below a grant.
    pub deny_read: &'a [PathBuf],
    /// Paths the sandbox keeps read-only even below a read-write grant (denyWrite).
    pub deny_write: &'a [PathBuf],
    /// The server's roots: what its sandbox shows of the host besides the system base.
    pub shown: &'a [PathBuf],
    /// Whether the sandbox keeps the dangerous files (`WRITE_PROTECTED`) read-only inside
    /// read-write grants (`protectDangerousFiles`).
    pub write_protect: bool,
    /// The call's own path arguments, canonical (they passed the policy and the roots check).
    pub call_paths: &'a [PathBuf],
}

impl BlockContext<'_> {
    /// True when Palisade knows `path` for its own reasons (see the module header).
    fn knows(&self, path: &Path) -> bool {
        path.is_absolute()
            && [self.call_paths, self.shown, self.deny_read, self.deny_write]
                .iter()
                .any(|set| set.iter().any(|k| path.starts_with(k)))
    }
}

/// What the sandbox blocked, as far as the message tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// A write to a read-only place (EROFS, or EACCES/EPERM on a writing syscall).
    Write { path: Option<String> },
    /// A read or other access refused (EACCES/EPERM without a writing syscall).
    Access { path: Option<String> },
    /// A path in `denyRead`.
    DeniedRead { path: String },
    /// A write to a path in `denyWrite`.
    DeniedWrite { path: String },
    /// A path of the call's own arguments that the sandbox does not show (ENOENT inside).
    Hidden { path: String },
    /// A network connection with no egress allowed.
    Network { target: Option<String> },
}

/// Classifies `text`; `None` when it is not (recognisably) the sandbox's doing.
pub fn classify(ctx: &BlockContext<'_>, text: &str) -> Option<Blocked> {
    if !ctx.sandboxed || text.starts_with(MARKER) {
        return None;
    }
    let lower = text.to_ascii_lowercase();
    let quoted = extract_path(text);
    // Whether the text names a path at all decides what kind of error it is; which path it
    // names is repeated only when Palisade knows that path itself.
    let names_a_path = quoted.is_some();
    let path = quoted.filter(|p| ctx.knows(Path::new(p)));

    if let Some(p) = &path {
        let pb = Path::new(p);
        // A masked directory is an empty tmpfs: what was below it is "not found".
        if ctx.deny_read.iter().any(|d| pb.starts_with(d))
            && (is_permission_error(&lower) || is_not_found(&lower))
        {
            return Some(Blocked::DeniedRead { path: p.clone() });
        }
    }
    if let Some(p) = &path {
        // A denied path is a read-only mount point (EROFS, EBUSY on remove or rename,
        // EEXIST on mkdir) or, when it did not exist, a read-only placeholder file (ENOTDIR
        // below it).
        let denied = ctx.deny_write.iter().any(|d| Path::new(p).starts_with(d));
        if denied && is_deny_write_error(&lower) {
            return Some(Blocked::DeniedWrite { path: p.clone() });
        }
    }
    if lower.contains("erofs") || lower.contains("read-only file system") {
        return Some(Blocked::Write { path });
    }
    if is_not_found(&lower) {
        // Only for a path of the call's own arguments outside the server's roots: then the
        // sandbox is what hides it. A path only the text names is never looked up on the
        // host (that answered "does it exist?" for any path an agent could plant).
        return path
            .filter(|p| {
                let pb = Path::new(p);
                ctx.call_paths.iter().any(|c| pb.starts_with(c))
                    && !ctx.shown.iter().any(|r| pb.starts_with(r))
            })
            .map(|path| Blocked::Hidden { path });
    }
    // A bare "permission denied" with neither an errno nor a path is a tool's own refusal
    // ("Permission denied: this tool needs the admin role"), not the kernel's.
    if is_permission_error(&lower) && (names_a_path || has_errno(&lower)) {
        return Some(if is_write_syscall(&lower) {
            Blocked::Write { path }
        } else {
            Blocked::Access { path }
        });
    }
    if !ctx.egress_allowed && is_network_error(&lower) {
        return Some(Blocked::Network {
            target: extract_target(text),
        });
    }
    None
}

/// Why a write to `p` inside a read-write grant was refused, when Palisade itself keeps it
/// read-only there: the fix is not another grant (a parent is granted already).
fn kept_read_only(ctx: &BlockContext<'_>, p: &Path) -> Option<String> {
    let server = ctx.server;
    if ctx.deny_write.iter().any(|d| p.starts_with(d)) {
        return Some(format!(
            "the sandbox of server `{server}` keeps {} read-only: it is under \
             sandbox.filesystem.denyWrite of server `{server}`; remove it there to allow writes",
            p.display()
        ));
    }
    let protected = crate::sandbox::write_protect::WRITE_PROTECTED
        .iter()
        .find(|e| p.ancestors().any(|a| a.ends_with(e)))?;
    (ctx.write_protect && ctx.shown.iter().any(|r| p.starts_with(r))).then(|| {
        format!(
            "the sandbox of server `{server}` keeps {} read-only: `{protected}` is one of the \
             files Palisade write-protects inside writable roots (code that runs later, \
             credentials); to allow it, set sandbox.filesystem.protectDangerousFiles to false \
             for server `{server}` (every such file then becomes writable)",
            p.display()
        )
    })
}

/// The text the agent receives: the marker, the explanation, then the original message.
pub fn annotate(ctx: &BlockContext<'_>, text: &str) -> Option<String> {
    let blocked = classify(ctx, text)?;
    let server = ctx.server;
    let kept = match &blocked {
        Blocked::Write { path: Some(p) } | Blocked::Access { path: Some(p) } => {
            kept_read_only(ctx, Path::new(p))
        }
        _ => None,
    };
    let explanation = match &blocked {
        _ if kept.is_some() => kept.unwrap_or_default(),
        Blocked::Write { path: Some(p) } => format!(
            "the sandbox of server `{server}` refused a write to {p}; to allow it, add {p} (or a \
             parent directory) to sandbox.filesystem.allowWrite of server `{server}`"
        ),
        Blocked::Write { path: None } => format!(
            "the sandbox of server `{server}` refused a write; to allow it, add the directory to \
             sandbox.filesystem.allowWrite of server `{server}`"
        ),
        Blocked::Access { path: Some(p) } => format!(
            "the sandbox of server `{server}` refused access to {p}; to allow it, add {p} (or a \
             parent directory) to sandbox.filesystem.allowRead (read) or allowWrite (write) of \
             server `{server}`"
        ),
        Blocked::Access { path: None } => format!(
            "the sandbox of server `{server}` refused access; to allow it, add the path to \
             sandbox.filesystem.allowRead or allowWrite of server `{server}`"
        ),
        Blocked::DeniedRead { path } => format!(
            "{path} is in sandbox.filesystem.denyRead of server `{server}`; remove it from \
             denyRead to allow reading it"
        ),
        Blocked::DeniedWrite { path } => format!(
            "{path} is in sandbox.filesystem.denyWrite of server `{server}`, so its sandbox keeps \
             it read-only; remove it from denyWrite to allow writing it"
        ),
        Blocked::Hidden { path } => format!(
            "the sandbox of server `{server}` does not show {path} (outside the server's \
             grants); to allow it, add {path} (or a parent directory) to \
             sandbox.filesystem.allowRead (read) or allowWrite (write) of server `{server}`"
        ),
        Blocked::Network { target } => format!(
            "the sandbox of server `{server}` has no network egress{}; to allow it, list the \
             domain in sandbox.network.allowedDomains of server `{server}`",
            target
                .as_ref()
                .map(|t| format!(" (connection to {t} refused)"))
                .unwrap_or_default()
        ),
    };
    Some(format!("{MARKER} {explanation}. Original error: {text}"))
}

/// An errno the kernel gave, as Node (`EACCES:`), Python (`[Errno 13]`) or Rust
/// (`(os error 13)`) print it.
fn has_errno(lower: &str) -> bool {
    ["eacces", "eperm", "[errno ", "(os error "]
        .iter()
        .any(|p| lower.contains(p))
}

fn is_deny_write_error(lower: &str) -> bool {
    [
        "erofs",
        "read-only file system",
        "ebusy",
        "device or resource busy",
        "eexist",
        "file exists",
        "enotdir",
        "not a directory",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

fn is_not_found(lower: &str) -> bool {
    lower.contains("enoent") || lower.contains("no such file or directory")
}

fn is_permission_error(lower: &str) -> bool {
    lower.contains("eacces")
        || lower.contains("eperm")
        || lower.contains("permission denied")
        || lower.contains("operation not permitted")
        || lower.contains("[errno 13]")
        || lower.contains("[errno 1]")
}

/// Node names the failing syscall (`EACCES: permission denied, open '/x'`); Python names the
/// operation less reliably, so anything unnamed counts as an access, not a write.
fn is_write_syscall(lower: &str) -> bool {
    const WRITES: [&str; 12] = [
        ", mkdir '",
        ", rmdir '",
        ", unlink '",
        ", rename '",
        ", copyfile '",
        ", symlink '",
        ", link '",
        ", chmod '",
        ", chown '",
        ", utime '",
        ", write '",
        ", truncate '",
    ];
    WRITES.iter().any(|w| lower.contains(w))
}

fn is_network_error(lower: &str) -> bool {
    [
        "econnrefused",
        "enetunreach",
        "ehostunreach",
        "connection refused",
        "network is unreachable",
        "no route to host",
        "eai_again",
        "temporary failure in name resolution",
        "getaddrinfo enotfound",
        "name or service not known",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

/// The first quoted absolute path (`'/x'` or `"/x"`), else the first bare absolute path.
fn extract_path(text: &str) -> Option<String> {
    for quote in ['\'', '"'] {
        let mut rest = text;
        while let Some(start) = rest.find(quote) {
            let after = &rest[start + 1..];
            let Some(end) = after.find(quote) else { break };
            let inner = &after[..end];
            if inner.starts_with('/') {
                return Some(inner.to_string());
            }
            rest = &after[end + 1..];
        }
    }
    text.split_whitespace()
        .map(|w| w.trim_matches(|c: char| c == ',' || c == ':' || c == ';' || c == ')'))
        .find(|w| w.starts_with('/') && w.len() > 1)
        .map(str::to_string)
}

/// `connect ECONNREFUSED 1.2.3.4:443` / `getaddrinfo EAI_AGAIN example.com`.
fn extract_target(text: &str) -> Option<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words.windows(2).find_map(|w| {
        let code = w[0].to_ascii_uppercase();
        let is_code = code.starts_with("ECONNREFUSED")
            || code.starts_with("EAI_AGAIN")
            || code.starts_with("ENOTFOUND")
            || code.starts_with("ENETUNREACH")
            || code.starts_with("EHOSTUNREACH");
        is_code.then(|| {
            w[1].trim_matches(|c: char| c == ',' || c == '\'')
                .to_string()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calls of these tests name the paths their messages quote.
    static CALL_PATHS: std::sync::LazyLock<Vec<PathBuf>> = std::sync::LazyLock::new(|| {
        [
            "/home/u",
            "/etc/secret",
            "/opt/data",
            "/srv/x.lock",
            "/root/.ssh",
            "/sys/kernel",
        ]
        .iter()
        .map(PathBuf::from)
        .collect()
    });

    fn ctx(sandboxed: bool) -> BlockContext<'static> {
        BlockContext {
            server: "fs",
            sandboxed,
            egress_allowed: false,
            deny_read: &[],
            deny_write: &[],
            shown: &[],
            write_protect: true,
            call_paths: &CALL_PATHS,
        }
    }

    // Real messages, copied from the servers/runtimes that produce them.
    const NODE_EROFS: &str =
        "Error: EROFS: read-only file system, open '/home/u/project/notes.txt'";
    const NODE_EACCES_OPEN: &str = "Error: EACCES: permission denied, open '/etc/secret'";
    const NODE_EACCES_MKDIR: &str = "EACCES: permission denied, mkdir '/opt/data/new'";
    const NODE_EPERM: &str = "EPERM: operation not permitted, unlink '/srv/x.lock'";
    const PY_EROFS: &str = "[Errno 30] Read-only file system: '/home/u/out.csv'";
    const PY_EACCES: &str = "[Errno 13] Permission denied: '/root/.ssh/id_rsa'";
    const PY_EPERM: &str = "[Errno 1] Operation not permitted: '/sys/kernel/x'";
    const NODE_CONNREFUSED: &str = "fetch failed: connect ECONNREFUSED 93.184.215.14:443";
    const NODE_EAI_AGAIN: &str = "getaddrinfo EAI_AGAIN api.github.com";
    const PY_UNREACH: &str = "[Errno 101] Network is unreachable";
    // server-filesystem's own roots check: the server refused, not the sandbox.
    const FS_OUTSIDE: &str = "Error: Access denied - path outside allowed directories: \
                              /etc/passwd not in /home/u/project";
    const FS_ENOENT: &str = "Error: ENOENT: no such file or directory, open '/home/u/missing'";

    #[test]
    fn erofs_from_node_and_python_is_a_blocked_write_with_its_path() {
        for (msg, path) in [
            (NODE_EROFS, "/home/u/project/notes.txt"),
            (PY_EROFS, "/home/u/out.csv"),
        ] {
            assert_eq!(
                classify(&ctx(true), msg),
                Some(Blocked::Write {
                    path: Some(path.into())
                }),
                "{msg}"
            );
            let text = annotate(&ctx(true), msg).unwrap();
            assert!(text.starts_with("[SANDBOX BLOCKED] "), "{text}");
            assert!(text.contains(path), "{text}");
            assert!(
                text.contains("sandbox.filesystem.allowWrite of server `fs`"),
                "{text}"
            );
            assert!(text.ends_with(msg), "original kept: {text}");
        }
    }

    #[test]
    fn permission_errors_split_into_writes_and_accesses_by_syscall() {
        assert!(matches!(
            classify(&ctx(true), NODE_EACCES_MKDIR),
            Some(Blocked::Write { .. })
        ));
        assert!(matches!(
            classify(&ctx(true), NODE_EPERM),
            Some(Blocked::Write { .. })
        ));
        assert_eq!(
            classify(&ctx(true), NODE_EACCES_OPEN),
            Some(Blocked::Access {
                path: Some("/etc/secret".into())
            })
        );
        assert!(matches!(
            classify(&ctx(true), PY_EACCES),
            Some(Blocked::Access { .. })
        ));
        assert!(matches!(
            classify(&ctx(true), PY_EPERM),
            Some(Blocked::Access { .. })
        ));
    }

    #[test]
    fn a_write_palisade_keeps_read_only_names_its_own_fix_not_a_grant() {
        let shown = [PathBuf::from("/home/u/project")];
        let hook =
            "Error: EROFS: read-only file system, open '/home/u/project/.git/hooks/pre-commit'";
        let c = BlockContext {
            shown: &shown,
            ..ctx(true)
        };
        let text = annotate(&c, hook).unwrap();
        assert!(text.contains("protectDangerousFiles to false"), "{text}");
        assert!(
            !text.contains("allowWrite"),
            "a parent is granted already: {text}"
        );
        let deny = [PathBuf::from("/home/u/project/.git")];
        let c = BlockContext {
            shown: &shown,
            deny_write: &deny,
            ..ctx(true)
        };
        let text = annotate(&c, hook).unwrap();
        assert!(text.contains("denyWrite"), "{text}");
        // Protection off: then it is not Palisade's doing, and the grant is the fix.
        let c = BlockContext {
            shown: &shown,
            write_protect: false,
            ..ctx(true)
        };
        let text = annotate(&c, hook).unwrap();
        assert!(text.contains("allowWrite"), "{text}");
    }

    #[test]
    fn deny_read_is_named_as_the_cause() {
        let deny = [PathBuf::from("/root/.ssh")];
        let c = BlockContext {
            deny_read: &deny,
            ..ctx(true)
        };
        let text = annotate(&c, PY_EACCES).unwrap();
        assert!(text.contains("denyRead"), "{text}");
    }

    #[test]
    fn network_errors_count_only_without_egress() {
        for msg in [NODE_CONNREFUSED, NODE_EAI_AGAIN, PY_UNREACH] {
            assert!(
                matches!(classify(&ctx(true), msg), Some(Blocked::Network { .. })),
                "{msg}"
            );
            let with_egress = BlockContext {
                egress_allowed: true,
                ..ctx(true)
            };
            assert_eq!(classify(&with_egress, msg), None, "{msg}");
        }
        let text = annotate(&ctx(true), NODE_CONNREFUSED).unwrap();
        assert!(text.contains("93.184.215.14:443"), "{text}");
        assert!(text.contains("allowedDomains"), "{text}");
    }

    #[test]
    fn never_for_unsandboxed_servers() {
        for msg in [NODE_EROFS, PY_EACCES, NODE_CONNREFUSED] {
            assert_eq!(classify(&ctx(false), msg), None);
            assert_eq!(annotate(&ctx(false), msg), None);
        }
    }

    #[test]
    fn errors_the_sandbox_did_not_cause_are_left_alone() {
        // The call's paths passed the roots check: they are inside what the sandbox shows.
        let shown = [PathBuf::from("/home/u")];
        let c = BlockContext {
            shown: &shown,
            ..ctx(true)
        };
        for msg in [FS_OUTSIDE, FS_ENOENT, "Invalid arguments for tool", ""] {
            assert_eq!(classify(&c, msg), None, "{msg}");
        }
    }

    #[test]
    fn already_marked_text_is_not_marked_twice() {
        let once = annotate(&ctx(true), NODE_EROFS).unwrap();
        assert_eq!(annotate(&ctx(true), &once), None);
    }

    #[test]
    fn not_found_for_a_call_path_outside_the_roots_is_hidden_by_the_sandbox() {
        let shown = [PathBuf::from("/home/u/granted")];
        let c = BlockContext {
            shown: &shown,
            ..ctx(true)
        };
        let msg = "ENOENT: no such file or directory, open '/home/u/notes/x.txt'";
        assert_eq!(
            classify(&c, msg),
            Some(Blocked::Hidden {
                path: "/home/u/notes/x.txt".into()
            })
        );
        assert!(annotate(&c, msg).unwrap().contains("allowRead"));
        // Inside a root, or a path the call never named: an ordinary "no such file".
        for msg in [
            "[Errno 2] No such file or directory: '/home/u/granted/x'",
            "[Errno 2] No such file or directory: '/etc/shadow'",
            "[Errno 2] No such file or directory",
        ] {
            assert_eq!(classify(&c, msg), None, "{msg}");
        }
    }

    /// Issue 23, finding 7 (regression: a quoted path was `lstat`ed on the host, so an agent
    /// that planted `ENOENT … open '<P>/x'` in text a tool echoes learned whether `<P>`
    /// existed, and was told to grant it). Paths only the text names are never repeated, and
    /// the answer cannot depend on the host: this module has no way left to ask it.
    #[test]
    fn a_planted_path_is_neither_looked_up_nor_offered_as_a_grant() {
        let c = BlockContext {
            call_paths: &[],
            ..ctx(true)
        };
        for planted in ["/root/.ssh", "/root/.aws", "/etc"] {
            for msg in [
                format!("ENOENT: no such file or directory, open '{planted}/x'"),
                format!("[Errno 2] No such file or directory: '{planted}/x'"),
            ] {
                assert_eq!(classify(&c, &msg), None, "{msg}");
            }
            let erofs = format!("EROFS: read-only file system, open '{planted}/x'");
            assert_eq!(classify(&c, &erofs), Some(Blocked::Write { path: None }));
            let text = annotate(&c, &erofs).unwrap();
            let explanation = text.split(". Original error:").next().unwrap();
            assert!(!explanation.contains(planted), "{text}");
        }
    }

    #[test]
    fn a_write_to_a_deny_write_path_names_deny_write_not_allow_write() {
        let deny = [PathBuf::from("/home/u/out.csv")];
        let c = BlockContext {
            deny_write: &deny,
            ..ctx(true)
        };
        let text = annotate(&c, PY_EROFS).unwrap();
        assert!(text.contains("denyWrite"), "{text}");
        assert!(!text.contains("allowWrite"), "{text}");
        // Below a placeholder, and removing the mount point.
        let deny = [PathBuf::from("/w/later")];
        let c = BlockContext {
            deny_write: &deny,
            ..ctx(true)
        };
        for msg in [
            "[Errno 20] Not a directory: '/w/later/sub/file'",
            "EBUSY: resource busy or locked, unlink '/w/later'",
            "[Errno 16] Device or resource busy: '/w/later'",
        ] {
            assert!(
                matches!(classify(&c, msg), Some(Blocked::DeniedWrite { .. })),
                "{msg}"
            );
        }
        // The same errors elsewhere are not the sandbox's.
        assert_eq!(
            classify(&c, "[Errno 20] Not a directory: '/w/other/x'"),
            None
        );
    }

    #[test]
    fn a_tools_own_permission_refusal_is_not_the_sandbox() {
        for msg in [
            "Permission denied: this tool needs the admin role",
            "ValueError: operation not permitted for guests",
        ] {
            assert_eq!(classify(&ctx(true), msg), None, "{msg}");
        }
        // The kernel's, with an errno but no path (Rust's io::Error), still counts.
        assert!(classify(&ctx(true), "Permission denied (os error 13)").is_some());
    }
}
