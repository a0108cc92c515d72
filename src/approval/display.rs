//! What a person reads on a terminal about an escalation, made safe to print. Every piece of
//! the question (server, tool, arguments, the reason with the paths it quotes, the remember
//! scope) may carry text an agent or a server chose; a terminal obeys the escape sequences in
//! it (`ESC[2A ESC[2K` repaints the line above, a single-byte CSI `U+009B` does the same on
//! some terminals, a right-to-left override turns `txt.exe` around). So every character a
//! terminal could act on is shown as a visible `\u{…}` escape instead: C0 controls (tab and
//! newline included: a question is one line per field), DEL, C1 controls, bidirectional
//! overrides, embeddings, isolates and marks, line and paragraph separators and zero-width
//! characters (`crate::terminal::acts_on`, shared with the pins review and the audit line).
//! Used by the tty approver and by `palisade approve`.
//!
//! Pure: no I/O. Never prints anything itself.

use std::fmt::Write as _;

use super::EscalationRequest;

/// `text` with every character a terminal could act on shown as `\u{HEX}`.
pub fn terminal_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if crate::terminal::acts_on(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

/// The lines describing `req` (server, tool, arguments, why, the grants an approval adds, and
/// the remember offer when there is one), each starting with two spaces and ending with a
/// newline, all terminal-safe.
pub fn describe_request(req: &EscalationRequest) -> String {
    // JSON already escapes C0 controls inside strings; C1 and bidi characters it leaves raw.
    let arguments = serde_json::to_string(&req.arguments).unwrap_or_else(|_| "?".into());
    let mut out = format!(
        "  server: {}\n  tool:   {}\n  args:   {}\n  why:    {}\n",
        terminal_safe(&req.server_name),
        terminal_safe(&req.tool_name),
        terminal_safe(&arguments),
        terminal_safe(&req.reason),
    );
    for g in &req.grants {
        let how = match g.access {
            crate::sandbox::Access::Rw => "read-write",
            crate::sandbox::Access::Ro => "read-only",
        };
        let _ = writeln!(
            out,
            "  grants: {how} {} to the server's sandbox (created if missing; for the session)",
            terminal_safe(&g.path.display().to_string())
        );
    }
    if let Some(scope) = &req.remember_scope {
        let _ = writeln!(
            out,
            "  or a:   approve and remember: {}",
            terminal_safe(&scope.describe())
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_controls_become_visible_text() {
        let shown = terminal_safe("/w/a\u{1b}[2A\u{1b}[2K\u{9b}2Ab\u{202e}txt.exe\u{7}\n\t\u{7f}");
        assert_eq!(
            shown,
            "/w/a\\u{1b}[2A\\u{1b}[2K\\u{9b}2Ab\\u{202e}txt.exe\\u{7}\\u{a}\\u{9}\\u{7f}"
        );
        assert!(!shown.chars().any(crate::terminal::acts_on));
    }

    #[test]
    fn ordinary_text_is_unchanged() {
        for s in ["/home/u/notes/today.md", "café ü 日本語 🙂", "a \\ b", ""] {
            assert_eq!(terminal_safe(s), s);
        }
    }

    #[test]
    fn every_field_of_a_request_is_escaped() {
        let evil = "x\u{1b}[2K\u{2067}y\u{85}";
        let mut req = EscalationRequest::new(
            evil,
            evil,
            serde_json::json!({evil: evil}),
            evil,
            serde_json::json!({}),
        );
        req.remember_scope = Some(crate::approval::RememberScope {
            server: evil.into(),
            tool: evil.into(),
            dirs: vec![crate::approval::RememberedDir {
                path: format!("/w/{evil}").into(),
                access: crate::sandbox::Access::Rw,
            }],
            domains: vec![evil.into()],
        });
        let shown = describe_request(&req);
        assert!(
            !shown
                .replace('\n', "")
                .chars()
                .any(crate::terminal::acts_on),
            "{shown:?}"
        );
        assert_eq!(shown.lines().count(), 5, "{shown}");
        assert!(shown.contains("x\\u{1b}[2K\\u{2067}y\\u{85}"), "{shown}");
    }
}
