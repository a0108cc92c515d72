//! The fs-server's structured errors: one code per way an access can fail, rendered as the
//! same JSON object for tool results and resource errors.
//!
//! Pure. Never hides an OS error's text: the gateway recognises sandbox refusals (EROFS,
//! EACCES, EPERM) from it and marks them `[SANDBOX BLOCKED]`.

use std::io;
use std::path::Path;

use serde::Serialize;
use serde_json::{json, Value};

use crate::roots::guard::GuardError;

/// Stable error codes (the seed's five plus the few a writable server needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    /// Outside every root, or a write under a read-only root, or a symlink final component.
    Forbidden,
    /// Not a usable path (relative, NUL, bad encoding, foreign URI host).
    BadPath,
    NotFound,
    NotADir,
    /// A directory or a special file where a regular file was needed.
    NotAFile,
    TooLarge,
    /// A file that is not UTF-8 text (read returns text only).
    NotText,
    /// Arguments that do not match the tool's input schema.
    BadArguments,
    /// Any other OS error; the message carries the OS text.
    IoError,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Forbidden => "FORBIDDEN",
            ErrorCode::BadPath => "BAD_PATH",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::NotADir => "NOT_A_DIR",
            ErrorCode::NotAFile => "NOT_A_FILE",
            ErrorCode::TooLarge => "TOO_LARGE",
            ErrorCode::NotText => "NOT_TEXT",
            ErrorCode::BadArguments => "BAD_ARGUMENTS",
            ErrorCode::IoError => "IO_ERROR",
        }
    }
}

/// A refused or failed access.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct FsError {
    pub code: ErrorCode,
    pub message: String,
}

impl FsError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        FsError {
            code,
            message: message.into(),
        }
    }

    /// `{"error": "FORBIDDEN", "message": "..."}`.
    pub fn to_json(&self) -> Value {
        json!({ "error": self.code.as_str(), "message": self.message })
    }

    /// Maps an OS error on `path` to a code, keeping the OS text in the message.
    pub fn from_io(err: &io::Error, path: &Path, what: &str) -> Self {
        let code = match err.raw_os_error() {
            Some(libc::ENOENT) => ErrorCode::NotFound,
            Some(libc::ENOTDIR) => ErrorCode::NotADir,
            Some(libc::EISDIR) => ErrorCode::NotAFile,
            Some(libc::EFBIG) => ErrorCode::TooLarge,
            // O_NOFOLLOW met a symlink swapped in after the check: never follow it.
            Some(libc::ELOOP) => ErrorCode::Forbidden,
            _ => ErrorCode::IoError,
        };
        FsError::new(code, format!("cannot {what} {}: {err}", path.display()))
    }
}

impl From<GuardError> for FsError {
    fn from(e: GuardError) -> Self {
        let code = match e {
            GuardError::BadPath(_) => ErrorCode::BadPath,
            GuardError::Outside { .. }
            | GuardError::ReadOnly { .. }
            | GuardError::DenyWrite { .. } => ErrorCode::Forbidden,
        };
        // The guard's messages already start with their code; keep only the reason.
        let text = e.to_string();
        let message = text
            .split_once(": ")
            .map(|(_, rest)| rest.to_string())
            .unwrap_or(text);
        FsError::new(code, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_keep_the_os_text() {
        let e = FsError::from_io(
            &io::Error::from_raw_os_error(libc::EROFS),
            Path::new("/w/x"),
            "write",
        );
        assert_eq!(e.code, ErrorCode::IoError);
        assert!(e.message.contains("Read-only file system"), "{}", e.message);
        let e = FsError::from_io(
            &io::Error::from_raw_os_error(libc::ENOENT),
            Path::new("/w/x"),
            "read",
        );
        assert_eq!(e.to_json()["error"], "NOT_FOUND");
    }
}
