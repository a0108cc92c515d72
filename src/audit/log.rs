//! The audit log writer: append-only JSONL, one sealed record per call, written and flushed
//! to the kernel before `append` returns, so the gateway can answer upstream only after the
//! record exists. Reopening an existing log continues its chain.
//!
//! Concurrency: a `std::sync::Mutex` around the file. The critical section is one `write`
//! of one line (a few hundred bytes, O_APPEND) plus hashing, microseconds, so calling it from
//! an async task does not stall the runtime in practice; with `sync_each` (fsync per record)
//! the gateway should call it through `tokio::task::spawn_blocking`.
//!
//! One writer per file: the log is locked (`flock`, exclusive, non-blocking) for as long as it
//! is open, and a second writer (another `palisade serve` given the same `auditLog`) is
//! refused at open with an error naming the file: two writers each continuing the chain from
//! their own last record would fork it.
//!
//! Anchored: after every record the chain's head (`seq`, `hash`) is written to `<log>.head`
//! (see `anchor`); opening a log whose end disagrees with its head is refused, since records
//! were then removed or re-sealed behind Palisade's back. Devices (`/dev/full` in tests) and
//! other non-regular files get no head.
//!
//! Fails closed: any write error is returned, and the log is then poisoned (every later
//! append fails too), because a partly written line would break the chain for every record
//! after it. Never drops a record silently.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::chain::{self, ChainState, LineError};
use super::record::AuditRecord;
use super::redact::Redaction;

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    // The cause is said in the message, not chained as a source as well: an error printed
    // with its chain said it twice.
    #[error("audit log {path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("audit log {path}: last record is damaged ({cause}); run `palisade audit verify`")]
    Damaged { path: PathBuf, cause: LineError },
    #[error("audit log {path}: an earlier write failed; refusing further records")]
    Poisoned { path: PathBuf },
    #[error(
        "audit log {path} is in use by another writer (another `palisade serve` with the same \
         auditLog?): two writers would break its hash chain; give each gateway its own log"
    )]
    InUse { path: PathBuf },
    #[error("audit log {path}: {detail}; run `palisade audit verify {path}`")]
    Anchor { path: PathBuf, detail: String },
    #[error("audit record could not be serialised: {0}")]
    Serialize(String),
}

/// Options for opening a log.
#[derive(Debug, Clone, Copy, Default)]
pub struct AuditOptions {
    pub redaction: Redaction,
    /// fsync after each record (durable across power loss; much slower).
    pub sync_each: bool,
}

struct Writer {
    /// Locked exclusively for the life of the log (released when it is closed).
    file: Flock<File>,
    /// The head file, for a log that is a regular file.
    head: Option<super::anchor::Head>,
    state: ChainState,
    poisoned: bool,
}

/// An open audit log. Share it behind an `Arc`; `append` takes `&self`.
pub struct AuditLog {
    path: PathBuf,
    options: AuditOptions,
    inner: Mutex<Writer>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("path", &self.path)
            .finish()
    }
}

/// The longest record line `open` will look back for when resuming a chain.
const MAX_TAIL: u64 = 4 << 20;

impl AuditLog {
    /// Opens (creating, mode 0600) with default options: redaction on.
    pub fn open(path: &Path) -> Result<AuditLog, AuditError> {
        Self::open_with(path, AuditOptions::default())
    }

    pub fn open_with(path: &Path, options: AuditOptions) -> Result<AuditLog, AuditError> {
        let io = |cause| AuditError::Io {
            path: path.to_path_buf(),
            cause,
        };
        // A log in a directory not made yet (`~/.local/state/palisade/audit.jsonl` on a fresh
        // machine): the directory is made, private, as the sandbox directory is.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                crate::private_dir::create(dir).map_err(io)?;
            }
        }
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(io)?;
        let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => locked,
            Err((_, Errno::EWOULDBLOCK)) => {
                return Err(AuditError::InUse {
                    path: path.to_path_buf(),
                })
            }
            Err((_, errno)) => return Err(io(std::io::Error::from(errno))),
        };
        let state = last_state(&mut file, path)?;
        let regular = file.metadata().map_err(io)?.is_file();
        let head = match regular {
            true => {
                let head = super::anchor::head_path(path);
                let anchored = super::anchor::read(&head).map_err(io)?;
                if let Some(detail) = anchored
                    .as_ref()
                    .and_then(|a| super::anchor::disagreement(&state, a))
                {
                    return Err(AuditError::Anchor {
                        path: path.to_path_buf(),
                        detail,
                    });
                }
                // Written at every open: a new log (or one from before logs were anchored) is
                // anchored from here, and a head cut to size by `open` is whole again.
                let mut head = super::anchor::Head::open(&head).map_err(io)?;
                head.write(&state, options.sync_each).map_err(io)?;
                Some(head)
            }
            false => None,
        };
        Ok(AuditLog {
            path: path.to_path_buf(),
            options,
            inner: Mutex::new(Writer {
                file,
                head,
                state,
                poisoned: false,
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Redacts, seals and writes one record; returns only after the line reached the kernel
    /// (and the disk, with `sync_each`). On error the call must fail closed.
    pub fn append(&self, record: &AuditRecord) -> Result<(), AuditError> {
        let body = super::line::bounded_body(record, self.options.redaction)
            .map_err(|e| AuditError::Serialize(e.to_string()))?;
        let mut w = self.inner.lock().map_err(|_| AuditError::Poisoned {
            path: self.path.clone(),
        })?;
        if w.poisoned {
            return Err(AuditError::Poisoned {
                path: self.path.clone(),
            });
        }
        let (mut line, next) = chain::seal(body, &w.state);
        line.push('\n');
        let result = w
            .file
            .write_all(line.as_bytes())
            .and_then(|()| w.file.flush())
            .and_then(|()| {
                if self.options.sync_each {
                    w.file.sync_data()
                } else {
                    Ok(())
                }
            })
            .and_then(|()| match &mut w.head {
                Some(head) => head.write(&next, self.options.sync_each),
                None => Ok(()),
            });
        match result {
            Ok(()) => {
                w.state = next;
                Ok(())
            }
            Err(cause) => {
                w.poisoned = true;
                Err(AuditError::Io {
                    path: self.path.clone(),
                    cause,
                })
            }
        }
    }
}

/// The chain state after the file's last record (genesis for an empty file).
fn last_state(file: &mut File, path: &Path) -> Result<ChainState, AuditError> {
    let io = |cause| AuditError::Io {
        path: path.to_path_buf(),
        cause,
    };
    let len = file.seek(SeekFrom::End(0)).map_err(io)?;
    if len == 0 {
        return Ok(ChainState::genesis());
    }
    let start = len.saturating_sub(MAX_TAIL);
    file.seek(SeekFrom::Start(start)).map_err(io)?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).map_err(io)?;
    let damaged = |cause| AuditError::Damaged {
        path: path.to_path_buf(),
        cause,
    };
    // A file not ending in a newline was cut mid-write: appending would break the chain.
    let text = std::str::from_utf8(&tail).map_err(|_| damaged(LineError::Malformed))?;
    let body = text
        .strip_suffix('\n')
        .ok_or(damaged(LineError::Malformed))?;
    let last = body.rsplit('\n').next().unwrap_or(body);
    if start > 0 && !body.contains('\n') {
        return Err(damaged(LineError::Malformed));
    }
    let (_, _, state) = chain::open_line(last).map_err(damaged)?;
    Ok(state)
}
