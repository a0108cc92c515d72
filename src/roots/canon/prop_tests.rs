//! Properties over generated paths (proptest): `normalize` never leaves a `..`, and symlinks
//! cannot smuggle a path out of its root.

use super::*;
use proptest::prelude::*;

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("..".to_string()),
        Just(".".to_string()),
        Just("%2e%2e".to_string()),
        Just("%2f".to_string()),
        Just("".to_string()),
        "[a-z]{1,4}",
        Just("link".to_string()),
    ]
}

proptest! {
    /// Whatever mix of `..`, `.`, empty segments and encodings follows the root, the
    /// result either is refused or lies lexically inside the root iff it has no `..`
    /// climbing above it; and it never contains a `..` component.
    #[test]
    fn normalize_never_leaves_dotdot(segs in prop::collection::vec(segment(), 0..12)) {
        let raw = format!("/root/{}", segs.join("/"));
        let encoded = segs.iter().any(|s| s.contains('%'));
        // Encoded dots and separators are refused outright, never interpreted.
        prop_assert_eq!(normalize(&raw, &Base::default()).is_err(), encoded);
        // The same path as a file:// URI is decoded once, then judged the same way
        // (a decoded `%2e%2e` becomes a real `..`, so it is checked as one).
        let uri = format!("file:///root/{}", segs.join("/"));
        if let Ok(p) = normalize(&uri, &Base::default()) {
            prop_assert!(!p.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)));
            let mut depth: i64 = 0;
            let mut escaped = false;
            for s in &segs {
                let s = if s == "%2e%2e" { ".." } else { s.as_str() };
                for part in s.split("%2f") {
                    match part {
                        ".." => { depth -= 1; escaped |= depth < 0; }
                        "." | "" => {}
                        _ => depth += 1,
                    }
                }
            }
            prop_assert_eq!(is_within(&p, Path::new("/root")), !escaped, "{} -> {}", uri, p.display());
        }
        if let Ok(p) = normalize(&raw, &Base::default()) {
            prop_assert!(p.is_absolute());
            prop_assert!(!p.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)));
            // Depth accounting: it is within /root exactly when no prefix climbs out.
            let mut depth: i64 = 0;
            let mut escaped = false;
            for s in &segs {
                match s.as_str() {
                    ".." => { depth -= 1; if depth < 0 { escaped = true; } }
                    "." | "" => {}
                    _ => depth += 1,
                }
            }
            prop_assert_eq!(is_within(&p, Path::new("/root")), !escaped, "{} -> {}", raw, p.display());
        }
    }

    /// Through a real directory with a symlink pointing outside, canonicalisation
    /// reports the real target: a path is judged inside the root only if it really is.
    #[test]
    fn symlinks_cannot_smuggle_paths_out(segs in prop::collection::vec(segment(), 0..8)) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let root = std::fs::canonicalize(&root).unwrap();
        let raw = format!("{}/{}", root.display(), segs.join("/"));
        if let Ok(p) = canonicalize(&raw, &Base::default()) {
            let through_link = {
                let mut depth: i64 = 0;
                let mut via = false;
                let mut escaped = false;
                for s in &segs {
                    match s.as_str() {
                        ".." => {
                            depth -= 1;
                            escaped |= depth < 0;
                            via &= depth > 0;
                        }
                        "." | "" => {}
                        "link" if depth == 0 && !escaped => { via = true; depth += 1; }
                        _ => depth += 1,
                    }
                }
                via || escaped
            };
            if is_within(&p, &root) {
                prop_assert!(!through_link, "{} -> {}", raw, p.display());
            }
        }
    }
}
