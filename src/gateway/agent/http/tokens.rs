//! Bearer tokens for the HTTP front (`--tokens FILE`): one `PRINCIPAL SHA256HEX` per line,
//! the hex SHA-256 of the token (the token itself is never stored), `#` comments. The file
//! must not be readable by group or others. A request's principal is the line whose hash
//! matches its token, compared in constant time.
//!
//! Pure except `load`, which reads the file and checks its mode.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use sha2::{Digest, Sha256};

/// The principals and their token hashes.
#[derive(Debug, Clone, Default)]
pub struct TokenTable {
    entries: Vec<(String, [u8; 32])>,
}

/// Why a token file cannot be used (the text names the line, or the file, and the fix).
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("line {0}: expected `PRINCIPAL SHA256HEX`")]
    Shape(usize),
    #[error("line {line}: principal `{name}` must be 1-64 characters of [A-Za-z0-9._-]")]
    Principal { line: usize, name: String },
    #[error("line {line}: `{hash}` is not 64 hex digits (give the SHA-256 of the token, e.g. `printf %s TOKEN | sha256sum`)")]
    Hash { line: usize, hash: String },
    #[error("line {line}: principal `{name}` is listed twice")]
    Twice { line: usize, name: String },
    #[error("no tokens: add a line `PRINCIPAL SHA256HEX`")]
    Empty,
    #[error("{}: {cause}", path.display())]
    Read {
        path: std::path::PathBuf,
        cause: std::io::Error,
    },
    #[error("{} is readable by group or others (mode {mode:o}); run `chmod 600 {}`", path.display(), path.display())]
    Readable { path: std::path::PathBuf, mode: u32 },
    #[error("{}: {cause}", path.display())]
    Invalid {
        path: std::path::PathBuf,
        cause: Box<TokenFileError>,
    },
}

/// A principal name: it names the principal's sandbox directory, so it is kept to
/// `[A-Za-z0-9._-]`, 1-64 characters, and never `.` or `..`.
pub fn valid_principal(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

impl TokenTable {
    /// Parses the file's text; errors name the line and the fix.
    pub fn parse(text: &str) -> Result<TokenTable, TokenFileError> {
        let mut entries = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let n = i + 1;
            let mut words = line.split_whitespace();
            let (Some(name), Some(hash), None) = (words.next(), words.next(), words.next()) else {
                return Err(TokenFileError::Shape(n));
            };
            if !valid_principal(name) {
                return Err(TokenFileError::Principal {
                    line: n,
                    name: name.to_string(),
                });
            }
            let mut digest = [0u8; 32];
            hex::decode_to_slice(hash, &mut digest).map_err(|_| TokenFileError::Hash {
                line: n,
                hash: hash.to_string(),
            })?;
            if entries.iter().any(|(p, _): &(String, [u8; 32])| p == name) {
                return Err(TokenFileError::Twice {
                    line: n,
                    name: name.to_string(),
                });
            }
            entries.push((name.to_string(), digest));
        }
        if entries.is_empty() {
            return Err(TokenFileError::Empty);
        }
        Ok(TokenTable { entries })
    }

    /// Loads `path`, refusing a file readable by group or others.
    pub fn load(path: &Path) -> Result<TokenTable, TokenFileError> {
        let read = |source| TokenFileError::Read {
            path: path.to_path_buf(),
            cause: source,
        };
        let meta = std::fs::metadata(path).map_err(read)?;
        if meta.mode() & 0o077 != 0 {
            return Err(TokenFileError::Readable {
                path: path.to_path_buf(),
                mode: meta.mode() & 0o777,
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        TokenTable::parse(&text).map_err(|e| TokenFileError::Invalid {
            path: path.to_path_buf(),
            cause: Box::new(e),
        })
    }

    /// The principal whose token this is.
    /// Whether `name` is one of the file's principals.
    pub fn names(&self, name: &str) -> bool {
        self.entries.iter().any(|(n, _)| n == name)
    }

    pub fn principal(&self, token: &str) -> Option<&str> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        // Every entry is compared, each in constant time: no early exit to time.
        for (name, want) in &self.entries {
            let diff = want
                .iter()
                .zip(&digest)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if diff == 0 {
                found = Some(name.as_str());
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(t: &str) -> String {
        hex::encode(Sha256::digest(t.as_bytes()))
    }

    #[test]
    fn tokens_map_to_principals_and_bad_lines_are_named() {
        let text = format!(
            "# team\nalice {}\n\nbob {}\n",
            hash("a-token"),
            hash("b-token")
        );
        let t = TokenTable::parse(&text).unwrap();
        assert_eq!(t.principal("a-token"), Some("alice"));
        assert_eq!(t.principal("b-token"), Some("bob"));
        assert_eq!(t.principal("c-token"), None);
        assert_eq!(t.principal(""), None);
        let e = TokenTable::parse("alice nothex\n").unwrap_err().to_string();
        assert!(
            e.starts_with("line 1:") && e.contains("64 hex digits"),
            "{e}"
        );
        let e = TokenTable::parse(&format!("../x {}\n", hash("t")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("principal `../x`"), "{e}");
        assert!(TokenTable::parse("# only comments\n").is_err());
    }
}
