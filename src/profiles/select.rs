//! Which profile a server gets: the one named in `sandbox.profile` (`"none"` for none), or
//! the one whose match rules recognise its command line. Pure.
//!
//! Only the command and its first two non-option arguments are looked at (plus the module
//! after `-m`): that is where a launcher (`npx`, `uvx`, `node`, `python -m`) names what it
//! runs, while later arguments are the server's own (directories, repositories) and must not
//! select a profile by accident.

use std::path::Path;

use serde::Serialize;

use super::{Catalog, Profile};

/// The profile chosen for a server and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Selected {
    pub profile: Profile,
    /// `"named"`, or the rule that matched (`package @scope/x`, `executable x`, ...).
    pub why: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    #[error("sandbox profile `{name}` does not exist (known: {known}; `none` for no profile)")]
    Unknown { name: String, known: String },
    #[error("the command matches several sandbox profiles ({0}); name one with sandbox.profile")]
    Ambiguous(String),
}

/// The profile for `command args...`: by `name` when given, else by matching.
pub fn select(
    catalog: &Catalog,
    name: Option<&str>,
    command: &str,
    args: &[String],
) -> Result<Option<Selected>, SelectError> {
    if let Some(name) = name {
        if name == "none" {
            return Ok(None);
        }
        return match catalog.get(name) {
            Some(p) => Ok(Some(Selected {
                profile: p.clone(),
                why: "named".into(),
            })),
            None => Err(SelectError::Unknown {
                name: name.to_string(),
                known: catalog.names().join(", "),
            }),
        };
    }
    let hits: Vec<Selected> = catalog
        .iter()
        .filter_map(|(p, _)| {
            matches(p, command, args).map(|why| Selected {
                profile: p.clone(),
                why,
            })
        })
        .collect();
    match hits.len() {
        0 => Ok(None),
        1 => Ok(hits.into_iter().next()),
        _ => Err(SelectError::Ambiguous(
            hits.iter()
                .map(|s| s.profile.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        )),
    }
}

fn file_name(s: &str) -> &str {
    Path::new(s)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(s)
}

/// The rule of `p` that recognises the command line, if any.
pub fn matches(p: &Profile, command: &str, args: &[String]) -> Option<String> {
    let m = &p.matches;
    let words: Vec<&str> = std::iter::once(command)
        .chain(
            args.iter()
                .map(String::as_str)
                .filter(|a| !a.starts_with('-'))
                .take(2),
        )
        .collect();
    for prefix in &m.argv_prefixes {
        let Some((first, rest)) = prefix.split_first() else {
            continue;
        };
        let fits = file_name(command) == first
            && args.len() >= rest.len()
            && rest.iter().zip(args).all(|(want, got)| want == got);
        if fits {
            return Some(format!("command `{}`", prefix.join(" ")));
        }
    }
    for w in &words {
        if let Some(e) = m.executables.iter().find(|e| file_name(w) == e.as_str()) {
            return Some(format!("executable {e}"));
        }
        for pkg in &m.packages {
            let versioned = w
                .strip_prefix(pkg.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('@'));
            let installed = w.contains(&format!("node_modules/{pkg}/"));
            if versioned || installed {
                return Some(format!("package {pkg}"));
            }
        }
    }
    if let Some(i) = args.iter().position(|a| a == "-m") {
        if let Some(module) = args.get(i + 1) {
            if let Some(pm) = m.python_modules.iter().find(|pm| *pm == module) {
                return Some(format!("python module {pm}"));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(command: &str, args: &[&str]) -> Option<String> {
        let c = Catalog::builtin().unwrap();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        select(&c, None, command, &args)
            .unwrap()
            .map(|s| s.profile.name)
    }

    #[test]
    fn common_launch_forms_select_their_profile() {
        let fs = Some("server-filesystem".to_string());
        assert_eq!(
            sel(
                "npx",
                &["-y", "@modelcontextprotocol/server-filesystem", "/d"]
            ),
            fs
        );
        assert_eq!(
            sel(
                "npx",
                &["-y", "@modelcontextprotocol/server-filesystem@2026.8.31"]
            ),
            fs
        );
        assert_eq!(
            sel(
                "node",
                &[
                    "/x/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js",
                    "/d"
                ]
            ),
            fs
        );
        assert_eq!(
            sel("/x/node_modules/.bin/mcp-server-filesystem", &["/d"]),
            fs
        );
        let git = Some("mcp-server-git".to_string());
        assert_eq!(sel("uvx", &["mcp-server-git", "--repository", "/r"]), git);
        assert_eq!(sel("/v/bin/mcp-server-git", &[]), git);
        assert_eq!(sel("python3", &["-m", "mcp_server_git"]), git);
        assert_eq!(
            sel("/usr/bin/palisade", &["fs-server", "--root", "/d"]),
            Some("palisade-fs-server".into())
        );
        assert_eq!(
            sel(
                "node",
                &["/x/node_modules/@modelcontextprotocol/server-memory/dist/index.js"]
            ),
            Some("server-memory".into())
        );
    }

    #[test]
    fn unrelated_or_late_arguments_select_nothing() {
        assert_eq!(sel("node", &["server.js"]), None);
        assert_eq!(sel("palisade", &["serve"]), None);
        // A directory argument named like a server is the server's data, not its identity.
        assert_eq!(
            sel("node", &["a.js", "--x", "b", "/data/mcp-server-git"]),
            None
        );
        // A package name prefix is not a match.
        assert_eq!(
            sel("npx", &["@modelcontextprotocol/server-filesystem-fork"]),
            None
        );
    }

    #[test]
    fn by_name_none_and_unknown() {
        let c = Catalog::builtin().unwrap();
        let args = vec!["mcp-server-git".to_string()];
        assert_eq!(
            select(&c, Some("mcp-server-time"), "uvx", &args)
                .unwrap()
                .map(|s| s.profile.name),
            Some("mcp-server-time".into())
        );
        assert_eq!(select(&c, Some("none"), "uvx", &args).unwrap(), None);
        let e = select(&c, Some("nope"), "uvx", &args).unwrap_err();
        assert!(e.to_string().contains("server-memory"), "{e}");
    }
}
