//! `file://` URIs (src/roots/uri.rs) and the path decoding in front of canonicalisation
//! (src/roots/canon/, `decode_input`/`normalize`).
//!
//! Invariants:
//! 1. An accepted URI names an absolute local path: `file:` scheme, no query or fragment,
//!    host empty or `localhost`; the decoded path has no NUL and fits PATH_MAX.
//! 2. Decoding never changes the path's shape: the decoded path has exactly as many `/`
//!    as the URI's path part (no `%2F` turns into a separator).
//! 3. Decoding happens once: re-encoding the decoded path and decoding again gives the same
//!    path (so `%252e` stays the name `%2e`).
//! 4. Both decoders agree: `canon::normalize` (the policy's) and `guard::normalize_input`
//!    (the RootGuard's) give the same normal path, or the policy's refuses a URI that
//!    decodes to non-UTF-8 bytes (the only disagreement allowed, and the safe way round).
//! 5. A normalised path is absolute with no `.` or `..` component.
//! 6. A plain (non-URI) path is taken literally, and refused when it carries an escape of
//!    `/`, `.`, `%`, `\` or NUL that a decoding server would read differently.
//! 7. Any byte string that is an absolute path round-trips through `path_to_uri` as ASCII.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use palisade::roots::canon::{self, Base, PathError, MAX_PATH_LEN};
use palisade::roots::{guard, uri};

pub fn run(data: &[u8]) {
    bytes_as_path(data);
    if let Ok(text) = std::str::from_utf8(data) {
        text_as_uri(text);
    }
}

fn text_as_uri(s: &str) {
    let decoded = uri::uri_to_path(s);
    if let Ok(p) = &decoded {
        let bytes = p.as_os_str().as_bytes();
        assert!(
            uri::is_file_uri(s),
            "{s:?} accepted without the file scheme"
        );
        assert!(!s.contains(['?', '#']), "{s:?}: query or fragment accepted");
        assert!(
            p.is_absolute() && bytes[0] == b'/',
            "{s:?} -> relative {p:?}"
        );
        assert!(!bytes.contains(&0), "{s:?} -> NUL in {p:?}");
        assert!(bytes.len() <= MAX_PATH_LEN, "{s:?} -> over-long path");
        let rest = &s[5..];
        let (host, path_part) = match rest.strip_prefix("//") {
            Some(after) => {
                let slash = after.find('/').expect("accepted authority form has a path");
                (&after[..slash], &after[slash..])
            }
            None => ("", rest),
        };
        assert!(
            host.is_empty() || host.eq_ignore_ascii_case("localhost"),
            "{s:?}: remote host {host:?} accepted"
        );
        let slashes = |b: &[u8]| b.iter().filter(|c| **c == b'/').count();
        assert_eq!(
            slashes(bytes),
            slashes(path_part.as_bytes()),
            "{s:?} -> {p:?}: decoding changed the number of segments"
        );
        // Decoded once: encoding the result and decoding it again is the identity.
        let again = uri::path_to_uri(p).expect("a decoded path has a URI");
        assert_eq!(
            &uri::uri_to_path(&again).as_ref(),
            &Ok(p),
            "{s:?} via {again:?}"
        );
    }

    let base = Base {
        cwd: Some(Path::new("/srv/cwd")),
        home: Some(Path::new("/home/u")),
    };
    let policy_view = canon::normalize(s, &base);
    let guard_view = guard::normalize_input(s, &base);
    if let Ok(p) = &policy_view {
        assert_normal(s, p);
    }
    if let Ok(p) = &guard_view {
        assert_normal(s, p);
    }
    match (&policy_view, &guard_view) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{s:?}: the policy and the guard disagree"),
        (Ok(a), Err(e)) => panic!("{s:?}: policy accepts {a:?}, guard refuses ({e})"),
        // The policy refuses a URI whose decoded bytes are not UTF-8 (even where a `..`
        // removes the offending segment); the guard works on bytes. Refusing is the safe
        // side of a disagreement, so that is the only one allowed.
        (Err(e), Ok(b)) => assert!(
            *e == PathError::Encoding && decoded.as_ref().is_ok_and(|raw| raw.to_str().is_none()),
            "{s:?}: guard accepts {b:?}, policy refuses ({e})"
        ),
        (Err(_), Err(_)) => {}
    }
    if uri::is_file_uri(s) {
        // A file URI is judged by the URI decoder alone.
        if let (Ok(p), Ok(raw)) = (&guard_view, &decoded) {
            assert_eq!(p, &canon::lexical_normalize(raw), "{s:?}");
        }
    } else if canon::decode_input(s).is_ok() {
        let lower = s.to_ascii_lowercase();
        for esc in ["%2f", "%2e", "%25", "%5c", "%00"] {
            assert!(
                !lower.contains(esc),
                "{s:?}: plain path with {esc} accepted"
            );
        }
    }
}

fn assert_normal(s: &str, p: &Path) {
    assert!(p.is_absolute(), "{s:?} -> {p:?} not absolute");
    assert!(
        !p.components()
            .any(|c| matches!(c, Component::CurDir | Component::ParentDir)),
        "{s:?} -> {p:?} keeps . or .."
    );
}

fn bytes_as_path(data: &[u8]) {
    let path = Path::new(OsStr::from_bytes(data));
    match uri::path_to_uri(path) {
        Ok(u) => {
            assert!(u.is_ascii(), "{path:?} -> non-ASCII {u:?}");
            assert!(u.starts_with("file:///"), "{u:?}");
            assert_eq!(
                uri::uri_to_path(&u).as_deref(),
                Ok(path),
                "{path:?} does not round-trip through {u:?}"
            );
        }
        Err(_) => assert!(
            data.is_empty() || data[0] != b'/' || data.contains(&0) || data.len() > MAX_PATH_LEN,
            "{path:?}: a valid absolute path has no URI"
        ),
    }
}
