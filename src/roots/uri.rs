//! `file://` URIs (RFC 8089) to and from absolute local paths.
//!
//! Sits between the MCP wire (roots, resource URIs) and `canon`/`guard`. Pure: no
//! filesystem access. It must never decode twice, never accept a host other than the local
//! one, and never let an encoded byte change the shape of the path (`%2F` would merge two
//! segments into one name; `%00` would truncate the path at the kernel).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::canon::{self, PathError, MAX_PATH_LEN};

/// Bytes written literally in a path: RFC 3986 `unreserved` plus the segment separator.
/// Everything else, including every non-ASCII or non-UTF-8 byte, is percent-encoded.
fn is_literal(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/')
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Percent-encodes raw bytes, keeping only unreserved bytes and `/` literal.
pub fn encode_path_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 8);
    for &b in bytes {
        if is_literal(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
    }
    out
}

/// Percent-encodes a whole string as ONE segment (`/` encoded too): the `{path}` contract of
/// the fs-server's resource templates.
pub fn encode_segment(text: &[u8]) -> String {
    encode_path_bytes(text).replace('/', "%2F")
}

/// `/a b/c` → `file:///a%20b/c`. The path must be absolute; it is encoded byte for byte, so
/// non-UTF-8 names survive the round trip.
pub fn path_to_uri(path: &Path) -> Result<String, PathError> {
    let bytes = path.as_os_str().as_bytes();
    canon::check_bytes(bytes)?;
    if bytes[0] != b'/' {
        return Err(PathError::Relative);
    }
    Ok(format!("file://{}", encode_path_bytes(bytes)))
}

/// Decodes `%XX` escapes exactly once. `allow_slash` says whether `%2F` may appear (only in
/// a single-segment capture, where the whole path was deliberately encoded as one segment).
pub fn percent_decode(text: &str, allow_slash: bool) -> Result<Vec<u8>, PathError> {
    let src = text.as_bytes();
    let mut out = Vec::with_capacity(src.len());
    let mut i = 0;
    while i < src.len() {
        let b = src[i];
        if b == b'%' {
            let hi = src.get(i + 1).and_then(|c| hex_val(*c));
            let lo = src.get(i + 2).and_then(|c| hex_val(*c));
            let (Some(hi), Some(lo)) = (hi, lo) else {
                return Err(PathError::Encoding);
            };
            let v = (hi << 4) | lo;
            if v == 0 {
                return Err(PathError::Nul);
            }
            if v == b'/' && !allow_slash {
                // An encoded separator inside a segment: a name containing `/` cannot exist
                // on POSIX, so this is either a mistake or an attempt to smuggle structure.
                return Err(PathError::Uri);
            }
            out.push(v);
            i += 3;
        } else {
            if b < 0x20 || b == 0x7f {
                // Raw control characters are never valid in a URI.
                return Err(PathError::Uri);
            }
            out.push(b);
            i += 1;
        }
    }
    Ok(out)
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// True when `text` looks like a URI with the `file` scheme (case-insensitive).
pub fn is_file_uri(text: &str) -> bool {
    text.len() >= 5 && text.as_bytes()[..5].eq_ignore_ascii_case(b"file:")
}

/// `file:///p`, `file://localhost/p` or `file:/p` → `/p`, percent-decoded once.
///
/// Refused (`PathError::Uri`): another scheme, a host other than `localhost` (UNC shares are
/// not local files), a query or fragment, a relative reference, an encoded `/`, raw control
/// characters. Refused as `Encoding`: a malformed escape. `Nul` for `%00`. The result is
/// absolute but not normalised: `..` segments are left for `canon` to collapse.
pub fn uri_to_path(uri: &str) -> Result<PathBuf, PathError> {
    if uri.is_empty() {
        return Err(PathError::Empty);
    }
    if uri.len() > MAX_PATH_LEN * 3 + 32 {
        return Err(PathError::TooLong);
    }
    if !is_file_uri(uri) {
        return Err(PathError::Uri);
    }
    let rest = &uri[5..];
    if rest.contains(['?', '#']) {
        return Err(PathError::Uri);
    }
    let path_part = if let Some(after) = rest.strip_prefix("//") {
        // Authority form: the host ends at the next `/`.
        let slash = after.find('/').ok_or(PathError::Uri)?;
        let host = &after[..slash];
        if !(host.is_empty() || host.eq_ignore_ascii_case("localhost")) {
            return Err(PathError::Uri);
        }
        &after[slash..]
    } else if rest.starts_with('/') {
        // RFC 8089's minimal form `file:/path`.
        rest
    } else {
        return Err(PathError::Uri);
    };
    let bytes = percent_decode(path_part, false)?;
    if bytes.len() > MAX_PATH_LEN {
        return Err(PathError::TooLong);
    }
    if bytes.first() != Some(&b'/') {
        return Err(PathError::Relative);
    }
    Ok(PathBuf::from(OsStr::from_bytes(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encodes_everything_outside_unreserved_and_slash() {
        assert_eq!(
            path_to_uri(Path::new("/home/a b/ü%#?.txt")).unwrap(),
            "file:///home/a%20b/%C3%BC%25%23%3F.txt"
        );
        assert_eq!(path_to_uri(Path::new("/")).unwrap(), "file:///");
        let raw = PathBuf::from(OsStr::from_bytes(b"/x/\xff\xfe"));
        assert_eq!(path_to_uri(&raw).unwrap(), "file:///x/%FF%FE");
    }

    #[test]
    fn relative_and_empty_paths_have_no_uri() {
        assert_eq!(path_to_uri(Path::new("a/b")), Err(PathError::Relative));
        assert_eq!(path_to_uri(Path::new("")), Err(PathError::Empty));
    }

    #[test]
    fn accepts_local_forms() {
        for uri in [
            "file:///tmp/a%20b",
            "file://localhost/tmp/a%20b",
            "FILE://LocalHost/tmp/a%20b",
            "file:/tmp/a%20b",
            "file:///tmp/a b",
        ] {
            assert_eq!(
                uri_to_path(uri).unwrap(),
                PathBuf::from("/tmp/a b"),
                "{uri}"
            );
        }
        assert_eq!(uri_to_path("file:///").unwrap(), PathBuf::from("/"));
    }

    #[test]
    fn refuses_remote_hosts_queries_and_other_schemes() {
        for uri in [
            "file://server/share/x",
            "file://evil.example/etc/passwd",
            "file:///tmp/x?y=1",
            "file:///tmp/x#frag",
            "http:///tmp/x",
            "file:tmp/x",
            "file://",
            "file://localhost",
            "tmp/x",
            "/tmp/x",
        ] {
            assert!(uri_to_path(uri).is_err(), "{uri} was accepted");
        }
    }

    #[test]
    fn refuses_encoding_tricks() {
        assert_eq!(uri_to_path("file:///etc%2Fpasswd"), Err(PathError::Uri));
        assert_eq!(uri_to_path("file:///tmp/x%00.txt"), Err(PathError::Nul));
        assert_eq!(uri_to_path("file:///tmp/%zz"), Err(PathError::Encoding));
        assert_eq!(uri_to_path("file:///tmp/%4"), Err(PathError::Encoding));
        assert_eq!(uri_to_path("file:///tmp/a\nb"), Err(PathError::Uri));
    }

    #[test]
    fn decodes_exactly_once() {
        // `%252e` is the literal name `%2e`, never `.`.
        assert_eq!(
            uri_to_path("file:///tmp/%252e%252e/x").unwrap(),
            PathBuf::from("/tmp/%2e%2e/x")
        );
        // Encoded dots are dots, left for canonicalisation to collapse (and check).
        assert_eq!(
            uri_to_path("file:///tmp/%2e%2e/etc").unwrap(),
            PathBuf::from("/tmp/../etc")
        );
    }

    #[test]
    fn single_segment_capture_allows_encoded_slash() {
        assert_eq!(encode_segment(b"/tmp/a b"), "%2Ftmp%2Fa%20b");
        assert_eq!(
            percent_decode("%2Ftmp%2Fa%20b", true).unwrap(),
            b"/tmp/a b".to_vec()
        );
    }

    proptest! {
        #[test]
        fn round_trips_arbitrary_byte_paths(
            segs in proptest::collection::vec(
                proptest::collection::vec(1u8..=255, 1..12), 0..6)
        ) {
            let mut bytes = Vec::new();
            for s in &segs {
                bytes.push(b'/');
                bytes.extend(s.iter().map(|b| if *b == b'/' { b'x' } else { *b }));
            }
            if bytes.is_empty() {
                bytes.push(b'/');
            }
            let path = PathBuf::from(OsStr::from_bytes(&bytes));
            let uri = path_to_uri(&path).unwrap();
            prop_assert!(uri.is_ascii());
            prop_assert!(uri.starts_with("file:///"));
            prop_assert_eq!(uri_to_path(&uri).unwrap(), path);
        }

        #[test]
        fn decoding_never_panics(s in "\\PC{0,40}") {
            let _ = uri_to_path(&format!("file:///{s}"));
            let _ = percent_decode(&s, true);
        }
    }
}
