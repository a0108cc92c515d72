//! Roots in a server's command line and environment: many servers ignore MCP roots (they are
//! deprecated in the current spec) but take their directories as arguments, e.g.
//! server-filesystem. A server config places them with placeholders:
//!
//! - an argument that is exactly `{roots}` becomes one argument per root path;
//! - `{roots:SEP}` anywhere in an argument or an environment value becomes the root paths
//!   joined with `SEP` (e.g. `--dirs={roots:,}`);
//! - `{roots}` inside a longer argument or in an environment value is `{roots::}` (joined
//!   with `:`, as in `PATH`).
//!
//! Pure. Expanded at every launch from the server's current root set, so a relaunch after a
//! widening passes the wider set. Never: interpret anything else in the text.

use std::path::PathBuf;

const OPEN: &str = "{roots";

/// Expands the placeholders in `args` (see the module header).
pub fn expand_args(args: &[String], roots: &[PathBuf]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len() + roots.len());
    for a in args {
        if a == "{roots}" {
            out.extend(roots.iter().map(|r| r.to_string_lossy().into_owned()));
        } else {
            out.push(expand_text(a, roots));
        }
    }
    out
}

/// Replaces every `{roots}` / `{roots:SEP}` in `text` with the joined root paths.
pub fn expand_text(text: &str, roots: &[PathBuf]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        let after = &rest[at + OPEN.len()..];
        let sep_and_tail = if let Some(tail) = after.strip_prefix('}') {
            Some((":", tail))
        } else if let Some(spec) = after.strip_prefix(':') {
            spec.find('}').map(|end| (&spec[..end], &spec[end + 1..]))
        } else {
            None
        };
        match sep_and_tail {
            Some((sep, tail)) => {
                let joined: Vec<String> = roots
                    .iter()
                    .map(|r| r.to_string_lossy().into_owned())
                    .collect();
                out.push_str(&joined.join(sep));
                rest = tail;
            }
            None => {
                // Not a placeholder (`{rootsx`, or `{roots:` without `}`): keep it as written.
                out.push_str(OPEN);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// True when `text` holds a placeholder (so the config relies on roots in its arguments).
pub fn has_placeholder(text: &str) -> bool {
    expand_text(text, &[]) != text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots() -> Vec<PathBuf> {
        vec![PathBuf::from("/s b"), PathBuf::from("/a")]
    }

    #[test]
    fn whole_argument_becomes_one_argument_per_root() {
        let args = vec!["server.js".to_string(), "{roots}".to_string()];
        assert_eq!(expand_args(&args, &roots()), ["server.js", "/s b", "/a"]);
        assert_eq!(expand_args(&args, &[]), ["server.js"]);
    }

    #[test]
    fn joined_forms_use_the_separator_or_a_colon() {
        assert_eq!(expand_text("--dirs={roots:,}", &roots()), "--dirs=/s b,/a");
        assert_eq!(expand_text("x{roots}y", &roots()), "x/s b:/ay");
        assert_eq!(expand_text("{roots:, }", &roots()), "/s b, /a");
        assert_eq!(
            expand_text("{roots:;}-{roots:;}", &roots()),
            "/s b;/a-/s b;/a"
        );
    }

    #[test]
    fn non_placeholders_are_left_alone() {
        for t in ["{rootsx}", "{roots:", "plain", "{root}", "{{roots"] {
            let want = if t == "{{roots" { "{{roots" } else { t };
            assert_eq!(expand_text(t, &roots()), want, "{t}");
        }
        assert!(has_placeholder("--d={roots:,}"));
        assert!(!has_placeholder("{rootsx}"));
    }
}
