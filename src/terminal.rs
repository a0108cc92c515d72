//! Which characters a terminal may act on, or that change how the text around them reads:
//! one definition for every place palisade puts text it did not write in front of a person
//! (an approval question, a tool's changed description, an audit line on stderr). A terminal
//! obeys the escape sequences in such text (`ESC[2A ESC[2K` repaints the line above, a single
//! byte CSI `U+009B` does the same on some terminals), and a right-to-left override turns
//! `txt.exe` around. Pure.

use std::fmt::Write;

/// Invisible, bidirectional and separator characters: they change how the text around them
/// reads without showing themselves.
pub fn invisible_or_bidi(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}' // soft hyphen
            | '\u{061C}' // Arabic letter mark
            | '\u{180E}' // Mongolian vowel separator
            | '\u{200B}'..='\u{200F}' // zero-width space/joiners, LRM, RLM
            | '\u{2028}' | '\u{2029}' // line and paragraph separators
            | '\u{202A}'..='\u{202E}' // embeddings and overrides
            | '\u{2060}'..='\u{2064}' // word joiner, invisible operators
            | '\u{2066}'..='\u{2069}' // isolates
            | '\u{FEFF}' // zero-width no-break space
            | '\u{FFF9}'..='\u{FFFB}' // interlinear annotations
            | '\u{E0000}'..='\u{E007F}' // tags
    )
}

/// True for a character that must not reach a terminal as it is: the C0 controls, DEL, the
/// C1 controls, and the invisible and bidirectional ones.
pub fn acts_on(c: char) -> bool {
    c.is_control() || invisible_or_bidi(c)
}

/// `json` (a JSON text) with every character a terminal may act on written as a `\u` escape,
/// which JSON allows inside a string, where alone such characters can stand: the text still
/// parses to the same value. serde_json escapes only the C0 controls.
pub fn escape_in_json(json: String) -> String {
    // Every such character is a C0 control, DEL or outside ASCII.
    if json.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return json;
    }
    escape_acting(&json, |c, out| {
        let mut units = [0u16; 2];
        for u in c.encode_utf16(&mut units) {
            let _ = write!(out, "\\u{u:04x}");
        }
    })
}

/// `text` with each character a terminal acts on written by `escape`, the rest as it is.
pub fn escape_acting(text: &str, escape: impl Fn(char, &mut String)) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if acts_on(c) {
            escape(c, &mut out);
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_json_keeps_its_value_and_shows_no_control() {
        let hostile = "a\u{1b}[31m\u{7f}\u{9b}2J\u{202e}exe.txt\u{2028}\u{e0041}é\u{a0}🙂";
        let json = serde_json::to_string(&serde_json::json!({ "k": hostile })).unwrap();
        let safe = escape_in_json(json);
        assert!(!safe.chars().any(acts_on), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["k"], hostile);
    }

    #[test]
    fn ordinary_json_is_unchanged() {
        for s in [r#"{"a":"café ü 日本語 🙂"}"#, r#"{"b":"x \\ y"}"#, "{}"] {
            assert_eq!(escape_in_json(s.to_string()), s);
        }
    }
}
