//! Input decoding: `file://` URIs decoded once; encoded dots and separators in plain paths
//! refused. Pure.

use super::*;

#[test]
fn file_uris_are_decoded_once() {
    let b = Base::default();
    assert_eq!(
        normalize("file:///home/u/my%20docs", &b).unwrap(),
        PathBuf::from("/home/u/my docs")
    );
    assert_eq!(
        normalize("file://localhost/etc/x", &b).unwrap(),
        PathBuf::from("/etc/x")
    );
    // Decoded once: a doubly encoded dot stays a literal `%2e` name component.
    assert_eq!(
        normalize("file:///a/%252e%252e/b", &b).unwrap(),
        PathBuf::from("/a/%2e%2e/b")
    );
    assert_eq!(
        normalize("file://evil.host/x", &b).unwrap_err(),
        PathError::Uri
    );
    assert_eq!(
        normalize("file:///a%ff", &b).unwrap_err(),
        PathError::Encoding
    );
    assert_eq!(normalize("file:///a%00b", &b).unwrap_err(), PathError::Nul);
}

#[test]
fn encoded_dots_and_separators_in_plain_paths_are_refused() {
    let b = Base::default();
    for bad in [
        "/ok/%2e%2e/etc",
        "/ok/..%2fetc",
        "/ok/%2E%2E",
        "/a%5c..",
        "/a%00",
    ] {
        assert_eq!(
            normalize(bad, &b).unwrap_err(),
            PathError::Encoding,
            "{bad}"
        );
    }
    assert_eq!(
        normalize("/ok/100%25done", &b).unwrap_err(),
        PathError::Encoding
    );
    assert_eq!(
        normalize("/ok/a%20b", &b).unwrap(),
        PathBuf::from("/ok/a%20b")
    );
    assert_eq!(normalize("/ok/50%", &b).unwrap(), PathBuf::from("/ok/50%"));
}
