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

/// The `"match": {...}` object of a profile's JSON text (up to its first `}`), or "" when it
/// has none (then no rule can match).
pub fn match_section(text: &str) -> &str {
    let Some((at, key)) = text
        .match_indices("\"match\"")
        .find(|(i, k)| text[i + k.len()..].trim_start().starts_with(':'))
    else {
        return "";
    };
    let rest = &text[at + key.len()..];
    match (rest.find('{'), rest.find('}')) {
        (Some(open), Some(close)) if open < close => &rest[open..=close],
        // Not an object written plainly: look everywhere (never a false "cannot match").
        _ => text,
    }
}

/// Whether a profile whose JSON text is `text` could match `command args...`: false only
/// when no string a match rule of `matches` would compare with this command line appears
/// quoted in its `"match"` object. Lets the catalog skip parsing the built-ins that cannot
/// match; exact for texts that write those strings plainly there, without JSON escapes
/// (every built-in, tested).
pub fn could_match(text: &str, command: &str, args: &[String]) -> bool {
    let text = match_section(text);
    let quoted = |s: &str| {
        !s.is_empty()
            && text
                .match_indices(s)
                .any(|(i, _)| text[..i].ends_with('"') && text[i + s.len()..].starts_with('"'))
    };
    let words = std::iter::once(command).chain(
        args.iter()
            .map(String::as_str)
            .filter(|a| !a.starts_with('-'))
            .take(2),
    );
    for w in words {
        // `argvPrefixes` (first word) and `executables` compare file names.
        if quoted(file_name(w)) {
            return true;
        }
        // `packages`: the word itself, or it up to a version (`pkg@1.2`).
        if quoted(w) || w.match_indices('@').any(|(i, _)| i > 0 && quoted(&w[..i])) {
            return true;
        }
        // `packages` installed: `.../node_modules/<pkg>/...`.
        for (i, m) in w.match_indices("node_modules/") {
            let rest = &w[i + m.len()..];
            if rest.match_indices('/').any(|(j, _)| quoted(&rest[..j])) {
                return true;
            }
        }
    }
    // `pythonModules`: the module after `-m`.
    args.iter()
        .position(|a| a == "-m")
        .and_then(|i| args.get(i + 1))
        .is_some_and(|m| quoted(m))
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
