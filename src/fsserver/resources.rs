//! The fs-server's governed resources (seed 003): `policy`, `index`, and the templates
//! `dir/{path}` and `file/{path}`, plus plain `file://` URIs.
//!
//! Pure: parses resource URIs and builds the policy and index documents. The `{path}` of a
//! template is ONE percent-encoded segment holding an absolute path; it is decoded exactly
//! once and then goes through the RootGuard like any tool argument.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use serde_json::{json, Value};

use super::error::{ErrorCode, FsError};
use super::ops::Limits;
use super::state::RootSet;
use crate::roots::uri;

pub const SCHEME: &str = "palisade-fs://";
pub const POLICY_URI: &str = "palisade-fs://policy";
pub const INDEX_URI: &str = "palisade-fs://index";
pub const DIR_TEMPLATE: &str = "palisade-fs://dir/{path}";
pub const FILE_TEMPLATE: &str = "palisade-fs://file/{path}";
const DIR_PREFIX: &str = "palisade-fs://dir/";
const FILE_PREFIX: &str = "palisade-fs://file/";

/// What a resource URI asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Policy,
    Index,
    Dir(PathBuf),
    File(PathBuf),
    /// A `file://` URI: a directory listing or a file's text, whichever it is.
    Any(PathBuf),
}

/// `palisade-fs://dir/%2Ftmp%2Fws` for a directory path.
pub fn dir_uri(path: &std::path::Path) -> String {
    format!(
        "{DIR_PREFIX}{}",
        uri::encode_segment(path.as_os_str().as_bytes())
    )
}

/// `palisade-fs://file/%2Ftmp%2Fws%2Fa.txt` for a file path.
pub fn file_uri(path: &std::path::Path) -> String {
    format!(
        "{FILE_PREFIX}{}",
        uri::encode_segment(path.as_os_str().as_bytes())
    )
}

/// Parses a resource URI. Unknown URIs are NOT_FOUND; malformed `{path}`s are BAD_PATH.
pub fn parse(uri_text: &str) -> Result<Target, FsError> {
    if uri_text == POLICY_URI {
        return Ok(Target::Policy);
    }
    if uri_text == INDEX_URI {
        return Ok(Target::Index);
    }
    if uri::is_file_uri(uri_text) {
        let p = uri::uri_to_path(uri_text)
            .map_err(|e| FsError::new(ErrorCode::BadPath, e.to_string()))?;
        return Ok(Target::Any(p));
    }
    if let Some(seg) = uri_text.strip_prefix(DIR_PREFIX) {
        return Ok(Target::Dir(segment_path(seg)?));
    }
    if let Some(seg) = uri_text.strip_prefix(FILE_PREFIX) {
        return Ok(Target::File(segment_path(seg)?));
    }
    Err(FsError::new(
        ErrorCode::NotFound,
        format!("no such resource: {uri_text} (see {POLICY_URI})"),
    ))
}

fn segment_path(seg: &str) -> Result<PathBuf, FsError> {
    let bad = |m: String| FsError::new(ErrorCode::BadPath, m);
    if seg.is_empty() {
        return Err(bad("empty {path}".into()));
    }
    if seg.contains(['/', '?', '#']) {
        return Err(bad(format!(
            "{{path}} must be ONE percent-encoded segment (encode `/` as %2F), got {seg:?}"
        )));
    }
    let bytes = uri::percent_decode(seg, true).map_err(|e| bad(e.to_string()))?;
    if bytes.first() != Some(&b'/') {
        return Err(bad(
            "{path} must decode to an absolute path (e.g. %2Fhome%2Fme%2Fa.txt)".into(),
        ));
    }
    Ok(PathBuf::from(OsStr::from_bytes(&bytes)))
}

/// The inspectable constitution: roots, rules, limits and the encoding contract.
pub fn policy_doc(set: &RootSet, limits: &Limits) -> Value {
    let example = std::path::Path::new("/home/me/project/notes a.txt");
    json!({
        "server": "palisade fs-server",
        "rootsSource": set.source.as_str(),
        "rootsVersion": set.version,
        "roots": set.describe()["roots"].clone(),
        "rules": [
            "A path is allowed iff its canonical form (~ expanded, . and .. collapsed, every symlink resolved) is a root or lies below one.",
            "The deepest root containing a path decides its access: writes need a read-write (rw) root.",
            "With no roots, every access is refused (FORBIDDEN).",
            "Client roots (roots/list) replace --root directories; an empty or all-invalid answer keeps the current set.",
            "Symlinks are never followed in the final component of a read or write, and never entered by search."
        ],
        "limits": {
            "maxReadBytes": limits.max_read_bytes,
            "maxWriteBytes": limits.max_write_bytes,
            "maxListEntries": limits.max_list_entries,
            "maxSearchResults": limits.max_search_results,
        },
        "pathEncoding": {
            "contract": "In dir/{path} and file/{path}, {path} is the absolute path percent-encoded as ONE segment (every byte outside A-Z a-z 0-9 - . _ ~ encoded, `/` as %2F), decoded exactly once.",
            "example": { "path": example.to_string_lossy(), "uri": file_uri(example) },
            "fileUris": "file:///abs/path (RFC 8089) is accepted too; only an empty host or localhost."
        },
        "errors": ["FORBIDDEN", "BAD_PATH", "NOT_FOUND", "NOT_A_DIR", "NOT_A_FILE", "TOO_LARGE", "NOT_TEXT", "IO_ERROR"],
    })
}

/// The roots as browsable directory resources.
pub fn index_doc(set: &RootSet) -> Value {
    let roots: Vec<Value> = set
        .guard
        .roots()
        .iter()
        .map(|r| {
            json!({
                "path": r.path.to_string_lossy(),
                "uri": dir_uri(&r.path),
                "fileUri": uri::path_to_uri(&r.path).unwrap_or_default(),
                "access": match r.access { crate::sandbox::Access::Ro => "ro", crate::sandbox::Access::Rw => "rw" },
            })
        })
        .collect();
    json!({ "rootsVersion": set.version, "roots": roots })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_take_one_encoded_segment() {
        let p = std::path::Path::new("/tmp/a b/c.txt");
        let u = file_uri(p);
        assert_eq!(u, "palisade-fs://file/%2Ftmp%2Fa%20b%2Fc.txt");
        assert_eq!(parse(&u).unwrap(), Target::File(p.to_path_buf()));
        assert_eq!(parse(&dir_uri(p)).unwrap(), Target::Dir(p.to_path_buf()));
        assert_eq!(parse(POLICY_URI).unwrap(), Target::Policy);
        assert_eq!(
            parse("file:///tmp/x").unwrap(),
            Target::Any(PathBuf::from("/tmp/x"))
        );
    }

    #[test]
    fn malformed_paths_are_bad_path_and_unknown_uris_not_found() {
        for u in [
            "palisade-fs://file/tmp/x",
            "palisade-fs://file/tmp%2Fx",
            "palisade-fs://file/%2Ftmp%00x",
            "palisade-fs://file/",
            "palisade-fs://dir/%zz",
            "file://remote/etc/passwd",
        ] {
            assert_eq!(parse(u).unwrap_err().code, ErrorCode::BadPath, "{u}");
        }
        assert_eq!(
            parse("palisade-fs://other").unwrap_err().code,
            ErrorCode::NotFound
        );
    }
}
