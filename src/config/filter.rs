//! Per-server name filters (`"tools": {"allow": [GLOBS], "deny": [GLOBS]}`, the same for
//! `prompts`): which of a server's own tool or prompt names the agent sees. Deny wins over
//! allow; an absent allow list admits every name.
//!
//! Pure: names in, verdicts out. Globs know `*` (any run of characters, none included) and
//! `?` (one character); everything else matches itself.

use serde::{Deserialize, Serialize};

/// One filter, as written in the config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NameFilter {
    /// Only names matching one of these are offered (absent: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// Names matching one of these are never offered, whatever `allow` says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

/// Why a name is hidden, for the refusal the agent reads and the audit record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hidden {
    Denied { pattern: String },
    NotAllowed,
}

impl std::fmt::Display for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hidden::Denied { pattern } => write!(f, "it matches deny `{pattern}`"),
            Hidden::NotAllowed => f.write_str("it matches no allow pattern"),
        }
    }
}

impl NameFilter {
    /// `Ok` when `name` is offered, else why not.
    pub fn check(&self, name: &str) -> Result<(), Hidden> {
        if let Some(p) = self.deny.iter().find(|p| glob_match(p, name)) {
            return Err(Hidden::Denied { pattern: p.clone() });
        }
        match &self.allow {
            Some(allow) if !allow.iter().any(|p| glob_match(p, name)) => Err(Hidden::NotAllowed),
            _ => Ok(()),
        }
    }

    /// A config mistake, named: an empty pattern matches nothing a user meant.
    pub fn validate(&self) -> Result<(), String> {
        let all = self.allow.iter().flatten().chain(&self.deny);
        match all.into_iter().find(|p| p.trim().is_empty()) {
            Some(_) => Err("holds an empty pattern; remove it or give a name or glob".into()),
            None => Ok(()),
        }
    }
}

/// Whether `name` matches `pattern` (`*`, `?`), by characters.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matching with one backtrack point for the last `*` (linear for these
    // patterns; no recursion to blow up on many stars).
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_by_star_and_question_mark() {
        assert!(glob_match("write_*", "write_file"));
        assert!(glob_match("write_*", "write_"));
        assert!(!glob_match("write_*", "rewrite_file"));
        assert!(glob_match("*_file", "move_file"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(glob_match("get_?", "get_x"));
        assert!(!glob_match("get_?", "get_xy"));
        assert!(glob_match("*", ""));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
    }

    #[test]
    fn deny_wins_and_allow_narrows() {
        let f = NameFilter {
            allow: Some(vec!["read_*".into(), "write_*".into()]),
            deny: vec!["write_*".into(), "move_file".into()],
        };
        assert_eq!(f.check("read_text_file"), Ok(()));
        assert_eq!(
            f.check("write_file"),
            Err(Hidden::Denied {
                pattern: "write_*".into()
            })
        );
        assert_eq!(
            f.check("move_file"),
            Err(Hidden::Denied {
                pattern: "move_file".into()
            })
        );
        assert_eq!(f.check("list_directory"), Err(Hidden::NotAllowed));
        assert_eq!(NameFilter::default().check("anything"), Ok(()));
        let bad = NameFilter {
            allow: None,
            deny: vec![" ".into()],
        };
        assert!(bad.validate().is_err());
    }
}
