//! Finding the filesystem paths hidden in values that nobody said were paths: a tool argument
//! a guessed annotation gave no path role, a prompt argument, a resource URI of a scheme that
//! is not `file:`. The policy and the gateway then check what is found like any path argument.
//!
//! Pure: text in, candidate paths out; no filesystem access. It errs towards finding more (a
//! wrong candidate costs a refusal the person can fix with an annotation; a missed one lets a
//! path through unchecked). Never: decode a URI more than once.

/// True when a string reads as a filesystem path: absolute, `~`, a `file:` URI, `./`
/// relative, or holding a `..` component anywhere. A bare relative name (`notes/a.txt`) is
/// not taken for one: it stays below the server's working directory unless a symlink leads
/// out, and there the sandbox's mounts are the wall.
pub fn looks_like_path(s: &str) -> bool {
    s.starts_with('/')
        || s == "~"
        || s.starts_with("~/")
        || super::uri::is_file_uri(s)
        || s.split(['/', '\\']).any(|c| c == "..")
        || s.starts_with("./")
        || s == "."
}

/// The paths a server could read for a resource URI of its own scheme
/// (`notes://file/{+path}`): after one percent-decoding of the path part, an absolute path
/// starting at an empty segment (`x://file//etc/passwd`, `x://file/%2Fetc`), the whole path
/// when the authority is empty (`x:///etc/passwd`), a `~` segment and what follows, and every
/// query value that `looks_like_path`. A `file:` URI is its own candidate. `Err` (refuse)
/// for a `..` segment, which would be resolved against a base only the server knows, and
/// for a path part that does not decode to UTF-8.
pub fn paths_in_uri(uri: &str) -> Result<Vec<String>, String> {
    if super::uri::is_file_uri(uri) {
        return Ok(vec![uri.to_string()]);
    }
    let Some((_scheme, rest)) = uri.split_once(':') else {
        return Ok(if looks_like_path(uri) {
            vec![uri.to_string()]
        } else {
            Vec::new()
        });
    };
    let (rest, query) = match rest.find(['?', '#']) {
        Some(i) if rest.as_bytes()[i] == b'?' => {
            let q = &rest[i + 1..];
            (&rest[..i], q.split('#').next().unwrap_or(""))
        }
        Some(i) => (&rest[..i], ""),
        None => (rest, ""),
    };
    let (authority_empty, path) = match rest.strip_prefix("//") {
        Some(after) => match after.find('/') {
            Some(i) => (i == 0, &after[i..]),
            None => (after.is_empty(), ""),
        },
        None => (false, rest),
    };
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| format!("the resource URI {uri:?} does not decode to UTF-8"))
    };
    let decoded = decode(path)?;
    if decoded.split(['/', '\\']).any(|c| c == "..") {
        return Err(format!(
            "the resource URI {uri:?} holds a `..` segment, which only the server could resolve"
        ));
    }
    let mut out = Vec::new();
    if authority_empty && decoded.starts_with('/') {
        out.push(decoded.clone());
    }
    let b = decoded.as_bytes();
    for j in 1..b.len() {
        let after_sep = b[j - 1] == b'/';
        if after_sep && (b[j] == b'/' || decoded[j..].starts_with("~/") || &decoded[j..] == "~") {
            out.push(decoded[j..].to_string());
        }
    }
    if !rest.starts_with("//") && looks_like_path(&decoded) {
        // `x:/etc/passwd` or `x:~/f` (no authority at all): the path part is the path.
        out.push(decoded.clone());
    }
    for pair in query.split('&') {
        let value = pair.split_once('=').map_or(pair, |(_, v)| v);
        let v = decode(&value.replace('+', " "))?;
        if looks_like_path(&v) {
            out.push(v);
        }
    }
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_read_as_paths() {
        for p in [
            "/etc/passwd",
            "~",
            "~/.ssh/id",
            "file:///x",
            "a/../../b",
            "./x",
            "..",
            ".",
        ] {
            assert!(looks_like_path(p), "{p}");
        }
        for p in [
            "notes/a.txt",
            "text/plain",
            "owner/repo",
            "hello",
            "",
            "https://x/y",
        ] {
            assert!(!looks_like_path(p), "{p}");
        }
    }

    #[test]
    fn paths_hidden_in_custom_scheme_uris_are_found() {
        let found = |u: &str| paths_in_uri(u).unwrap();
        assert_eq!(found("notes://file//etc/passwd"), vec!["/etc/passwd"]);
        assert_eq!(found("notes://file/%2Fetc%2Fpasswd"), vec!["/etc/passwd"]);
        assert_eq!(found("notes:///etc/passwd"), vec!["/etc/passwd"]);
        assert_eq!(found("notes:/etc/passwd"), vec!["/etc/passwd"]);
        assert_eq!(found("notes://x/~/.ssh/id"), vec!["~/.ssh/id"]);
        assert_eq!(
            found("notes://x/read?path=%2Fetc%2Fshadow&n=1"),
            vec!["/etc/shadow"]
        );
        assert_eq!(found("file:///etc/passwd"), vec!["file:///etc/passwd"]);
        // The server's own namespace: nothing that reads as a host path.
        assert!(found("test://static/resource/1").is_empty());
        assert!(found("notes://file/today.md").is_empty());
        assert!(paths_in_uri("notes://file/..%2F..%2Fetc").is_err());
        assert!(paths_in_uri("notes://file/a/../../b").is_err());
    }
}
