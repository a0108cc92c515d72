//! Finding the files inside read-write grants that must stay read-only: what a compromised
//! server would change to run code the next time the user works there (git hooks and
//! config, shell and tool start-up files), as srt refuses by default.
//!
//! The search is not only at the top of a grant: a grant is often a directory of checkouts
//! (`~/src`), and `~/src/app/.git/hooks` runs code as surely as `~/src/.git/hooks`. Every
//! directory down to [`SEARCH_DEPTH`] levels below a grant is looked at, as srt's mandatory
//! deny search does, within a budget of directories so that a huge grant cannot stall a
//! launch.

use std::path::{Path, PathBuf};

/// Paths, relative to a directory inside a read-write grant, that stay read-only.
pub const WRITE_PROTECTED: &[&str] = &[
    ".git/hooks",
    ".git/config",
    ".gitconfig",
    ".gitmodules",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".envrc",
    ".ripgreprc",
    ".mcp.json",
    ".vscode",
    ".idea",
    ".claude/commands",
    ".claude/agents",
    ".claude/settings.json",
    // Persistence: keys, user services, autostart entries, session start-up files (issue 23,
    // finding 4: an approved grant of a directory that holds them must not make them
    // writable).
    ".ssh",
    ".config/systemd",
    ".config/autostart",
    ".config/environment.d",
    ".config/fish",
    ".local/share/systemd",
    ".kshrc",
    ".cshrc",
    ".tcshrc",
    ".xprofile",
    ".xsessionrc",
    ".pam_environment",
];

/// How many directory levels below a grant are searched (the grant itself is level 0):
/// srt's default search depth.
pub const SEARCH_DEPTH: usize = 3;

/// The most directories looked at per grant. A home directory holds far fewer than this
/// within three levels; a grant that holds more is searched in part and the rest named.
pub const DIR_BUDGET: usize = 20_000;

/// Directories never descended into: their contents are not a place code is run from, and
/// they are large (a repository's objects, a package tree).
const NOT_SEARCHED: &[&str] = &[".git", "node_modules"];

/// What the search found in one grant.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// Protected paths that exist as real files or directories (never symlinks: a link
    /// planted earlier would turn the read-only re-bind into a window onto its target).
    pub paths: Vec<PathBuf>,
    /// Set when the budget ran out before the search did: deeper directories that were not
    /// looked at may hold unprotected files.
    pub truncated: bool,
}

/// The protected paths under `grant` (a canonical directory), breadth first so that a
/// truncated search has covered the shallow levels.
pub fn find(grant: &Path) -> Found {
    // A grant that is not canonical would put a link between it and what is re-bound.
    if std::fs::canonicalize(grant).ok().as_deref() != Some(grant) {
        return Found::default();
    }
    find_with(grant, SEARCH_DEPTH, DIR_BUDGET)
}

fn find_with(grant: &Path, max_depth: usize, budget: usize) -> Found {
    let mut found = Found::default();
    let mut level = vec![grant.to_path_buf()];
    let mut visited = 0;
    for depth in 0..=max_depth {
        let mut next = Vec::new();
        for dir in level {
            if visited == budget {
                found.truncated = true;
                return found;
            }
            visited += 1;
            found.paths.extend(protected_in(&dir));
            if depth < max_depth {
                next.extend(subdirectories(&dir));
            }
        }
        level = next;
    }
    found
}

/// The `WRITE_PROTECTED` entries of `dir` that exist, with no symlink between `dir` and
/// them. `dir` is real (the grant is canonical, and the walk follows no link), so only the
/// entry and, for `.git/hooks` and the like, its own parent need checking: one `lstat`
/// each, most of them failing at once, since a directory holds few of these names.
fn protected_in(dir: &Path) -> Vec<PathBuf> {
    let real = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|md| !md.file_type().is_symlink());
    WRITE_PROTECTED
        .iter()
        .map(|rel| dir.join(rel))
        .filter(|p| {
            // `.git/hooks`: `.git` itself must be a real directory, not a link elsewhere.
            real(p)
                && p.parent()
                    .is_some_and(|parent| parent == dir || real(parent))
        })
        .collect()
}

/// The real subdirectories of `dir` (symlinks are not followed), sorted, minus those never
/// searched. An unreadable directory has none.
fn subdirectories(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| !NOT_SEARCHED.iter().any(|n| e.file_name() == *n))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(paths: &[&str]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for p in paths {
            let full = t.path().join(p);
            if let Some(dir) = p.strip_suffix('/') {
                std::fs::create_dir_all(t.path().join(dir)).unwrap();
            } else {
                std::fs::create_dir_all(full.parent().unwrap()).unwrap();
                std::fs::write(full, "x").unwrap();
            }
        }
        t
    }

    fn rel(t: &tempfile::TempDir, found: &Found) -> Vec<String> {
        let base = std::fs::canonicalize(t.path()).unwrap();
        found
            .paths
            .iter()
            .map(|p| p.strip_prefix(&base).unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn nested_repositories_and_rc_files_are_found_down_to_the_search_depth() {
        let t = tree(&[
            ".git/hooks/",
            ".git/config",
            ".bashrc",
            "app/.git/hooks/",
            "app/.git/config",
            "a/b/lib/.git/config",
            "a/b/c/too-deep/.git/config",
            "a/.envrc",
            "a/b/.vscode/",
        ]);
        let base = std::fs::canonicalize(t.path()).unwrap();
        let found = find(&base);
        assert!(!found.truncated);
        assert_eq!(
            rel(&t, &found),
            [
                ".git/hooks",
                ".git/config",
                ".bashrc",
                "a/.envrc",
                "app/.git/hooks",
                "app/.git/config",
                "a/b/.vscode",
                "a/b/lib/.git/config",
            ]
        );
    }

    #[test]
    fn symlinks_are_neither_protected_nor_followed() {
        let t = tree(&["elsewhere/.bashrc", "elsewhere/.git/config", "real/"]);
        let base = std::fs::canonicalize(t.path()).unwrap();
        // A link to a directory is not descended into; a link named like a protected
        // file or whose parent is a link is not re-bound.
        std::os::unix::fs::symlink(base.join("elsewhere"), base.join("linked")).unwrap();
        std::os::unix::fs::symlink(base.join("elsewhere/.git"), base.join("real/.git")).unwrap();
        std::os::unix::fs::symlink(base.join("elsewhere/.bashrc"), base.join(".bashrc")).unwrap();
        let found = find(&base);
        assert_eq!(
            rel(&t, &found),
            ["elsewhere/.git/config", "elsewhere/.bashrc"]
        );
    }

    #[test]
    fn git_and_node_modules_are_not_searched() {
        let t = tree(&[
            ".git/modules/sub/.git/config",
            "node_modules/pkg/.git/config",
            "node_modules/pkg/.bashrc",
        ]);
        let base = std::fs::canonicalize(t.path()).unwrap();
        assert_eq!(rel(&t, &find(&base)), Vec::<String>::new());
    }

    #[test]
    fn a_search_over_budget_covers_the_shallow_levels_and_says_it_was_cut() {
        let t = tree(&[".bashrc", "a/b/.bashrc", "c/", "d/"]);
        let base = std::fs::canonicalize(t.path()).unwrap();
        // Budget 4: the grant and its three subdirectories, not `a/b`.
        let found = find_with(&base, SEARCH_DEPTH, 4);
        assert!(found.truncated);
        assert_eq!(rel(&t, &found), [".bashrc"]);
        let found = find_with(&base, SEARCH_DEPTH, 5);
        assert!(!found.truncated);
        assert_eq!(rel(&t, &found), [".bashrc", "a/b/.bashrc"]);
    }
}
