//! Where the attack tables go: under target/ (or PALISADE_ATTACK_TABLE) always, and into
//! docs/security.md between their markers with PALISADE_UPDATE_DOCS=1.

use std::path::{Path, PathBuf};

/// Always written under target/ (or to PALISADE_ATTACK_TABLE); copied into docs/security.md
/// with PALISADE_UPDATE_DOCS=1.
pub(crate) fn write_table(table: &str) {
    let target = std::env::var_os("PALISADE_ATTACK_TABLE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-attack-table.md"));
    let _ = std::fs::write(&target, table);
    if std::env::var_os("PALISADE_UPDATE_DOCS").is_some() {
        let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/security.md");
        let text = std::fs::read_to_string(&doc).unwrap();
        let (start, end) = (
            "<!-- serve-attack-table:start -->\n",
            "<!-- serve-attack-table:end -->",
        );
        let a = text.find(start).expect("start marker") + start.len();
        let b = text.find(end).expect("end marker");
        std::fs::write(&doc, format!("{}{}{}", &text[..a], table, &text[b..])).unwrap();
    }
}

/// `write_table` for another marked table of docs/security.md.
pub(crate) fn write_marked_table(table: &str, marker: &str, file: &str) {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join(file);
    let _ = std::fs::write(&target, table);
    if std::env::var_os("PALISADE_UPDATE_DOCS").is_some() {
        let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/security.md");
        let text = std::fs::read_to_string(&doc).unwrap();
        let (start, end) = (
            format!("<!-- {marker}:start -->\n"),
            format!("<!-- {marker}:end -->"),
        );
        let a = text.find(&start).expect("start marker") + start.len();
        let b = text.find(&end).expect("end marker");
        std::fs::write(&doc, format!("{}{}{}", &text[..a], table, &text[b..])).unwrap();
    }
}
