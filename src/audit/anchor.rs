//! The chain's anchor: the last record's `seq` and `hash`, kept in a file of its own next to
//! the log (`<log>.head`), rewritten after every record in place, as one write of a fixed
//! size (the JSON padded with blanks) through a descriptor the writer keeps open while its
//! path still names that file (see `Head`), so a reader sees the old head or the new one. Not by
//! rename: the kernel drops a mount whose file is replaced from another mount namespace, so
//! a rename would remove the mask that hides the head file inside a sandbox. A write cut by
//! a crash leaves a head that does not parse, which is refused (fail closed).
//! A chain alone cannot show that records were dropped and the rest re-sealed, or cut off the
//! end: whoever can write the log can recompute every hash after the change. The head file
//! is one of Palisade's protected files (masked in every sandbox, like the log itself), so
//! rewriting the log without it leaves the two disagreeing: `palisade audit verify` and the
//! next open of the log say so.
//!
//! Small I/O helpers only; the decision what a disagreement means is the caller's.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::chain::ChainState;

/// The head file of the log at `log`: the same name with `.head` appended.
pub fn head_path(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".head");
    PathBuf::from(name)
}

#[derive(Serialize, Deserialize)]
struct HeadFile {
    seq: u64,
    hash: String,
}

/// The anchored state, `None` when there is no head file.
pub fn read(head: &Path) -> std::io::Result<Option<ChainState>> {
    let text = match std::fs::read(head) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let h: HeadFile = serde_json::from_slice(&text).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is not a head file: {e}", head.display()),
        )
    })?;
    Ok(Some(ChainState {
        seq: h.seq,
        hash: h.hash,
    }))
}

/// Every head file has this size: room for the JSON with any `seq`, padded with blanks.
const HEAD_SIZE: usize = 128;

/// A head file held open by its log's writer. Each record checks that the head's name, in
/// the log's directory, still names the file held (one `fstatat`) and rewrites it through
/// the kept descriptor (one positioned write): no open or close per record. A head deleted,
/// replaced or moved away behind the gateway's back is opened again and overwritten with the
/// true state, so the change is caught; a directory removed fails the record, and the log
/// with it.
///
/// The name is always resolved in the directory the log was opened in, held by descriptor:
/// a server that can write where the log lies (a misconfiguration, but one to survive) and
/// renames that directory and plants another in its place, with a head there that is a
/// symlink or a hard link to a file of the host's, makes Palisade write neither: the renamed
/// directory is still the one written to, a symlink is not followed (`O_NOFOLLOW`) and a
/// file with other links, or not a regular file, is refused (the record fails).
pub struct Head {
    dir: std::os::fd::OwnedFd,
    name: std::ffi::OsString,
    file: std::fs::File,
    /// The held file's device and inode.
    id: (u64, u64),
}

impl Head {
    /// Opens the head file at `path` for writing (created 0600 when missing). A longer file
    /// (not written by this module) is cut to `HEAD_SIZE`; the caller writes the head next.
    pub fn open(path: &Path) -> std::io::Result<Head> {
        use nix::fcntl::OFlag;
        use std::os::fd::FromRawFd;
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} cannot be a head file's path", path.display()),
            ));
        };
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let fd = nix::fcntl::open(
            dir,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )?;
        // SAFETY: `open` just returned this descriptor, owned by nothing else.
        let dir = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        Head::open_in(dir, name.to_owned())
    }

    /// Opens (or creates) the head `name` in directory `dir`, refusing a symlink, a file
    /// that is not a regular one, or one with other links.
    fn open_in(dir: std::os::fd::OwnedFd, name: std::ffi::OsString) -> std::io::Result<Head> {
        use nix::fcntl::OFlag;
        use std::os::fd::{AsRawFd, FromRawFd};
        use std::os::unix::fs::MetadataExt;
        let fd = nix::fcntl::openat(
            Some(dir.as_raw_fd()),
            name.as_os_str(),
            // O_NONBLOCK: a FIFO planted under the name fails (ENXIO) rather than hang the
            // record, and with it every call, until something reads it.
            OFlag::O_WRONLY
                | OFlag::O_CREAT
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC
                | OFlag::O_NONBLOCK,
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| {
            let why = match e {
                nix::errno::Errno::ELOOP => "it is a symbolic link".to_string(),
                e => e.to_string(),
            };
            std::io::Error::other(format!(
                "cannot open the audit head file {}: {why}",
                name.to_string_lossy()
            ))
        })?;
        // SAFETY: `openat` just returned this descriptor, owned by nothing else.
        let file = unsafe { std::fs::File::from_raw_fd(fd) };
        let meta = file.metadata()?;
        if !meta.file_type().is_file() || meta.nlink() != 1 {
            return Err(std::io::Error::other(format!(
                "the audit head file {} is not a regular file of its own ({} link(s)): \
                 refusing to write it",
                name.to_string_lossy(),
                meta.nlink()
            )));
        }
        if meta.len() > HEAD_SIZE as u64 {
            file.set_len(HEAD_SIZE as u64)?;
        }
        Ok(Head {
            dir,
            name,
            file,
            id: (meta.dev(), meta.ino()),
        })
    }

    /// Rewrites the head with `state`: one positioned write of `HEAD_SIZE` bytes at offset 0
    /// of the file the name names (opened again when it is no longer the one held), flushed
    /// to disk with `sync`.
    pub fn write(&mut self, state: &ChainState, sync: bool) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::FileExt;
        let named = match nix::sys::stat::fstatat(
            Some(self.dir.as_raw_fd()),
            self.name.as_os_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => Some((st.st_dev, st.st_ino)),
            Err(nix::errno::Errno::ENOENT) => None,
            Err(e) => return Err(e.into()),
        };
        if named != Some(self.id) {
            let dir = self.dir.try_clone()?;
            *self = Head::open_in(dir, self.name.clone())?;
        }
        self.file.write_all_at(&encode(state)?, 0)?;
        if sync {
            self.file.sync_data()?;
        }
        Ok(())
    }
}

/// The head file's bytes for `state`: its JSON padded with blanks to `HEAD_SIZE`, ending in
/// a newline.
fn encode(state: &ChainState) -> std::io::Result<Vec<u8>> {
    let mut body = serde_json::to_vec(&HeadFile {
        seq: state.seq,
        hash: state.hash.clone(),
    })
    .map_err(std::io::Error::other)?;
    if body.len() >= HEAD_SIZE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "chain state too long for a head file",
        ));
    }
    body.resize(HEAD_SIZE - 1, b' ');
    body.push(b'\n');
    Ok(body)
}

/// Why `last` (the state the log ends in) disagrees with `anchored`, if it does.
pub fn disagreement(last: &ChainState, anchored: &ChainState) -> Option<String> {
    (last != anchored).then(|| {
        format!(
            "the log ends at seq {} (hash {}) but its head file anchors seq {} (hash {}): \
             records were removed, added or re-sealed by another writer",
            last.seq, last.hash, anchored.seq, anchored.hash
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_replaces() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("audit.jsonl");
        let head = head_path(&log);
        assert_eq!(head, d.path().join("audit.jsonl.head"));
        assert_eq!(read(&head).unwrap(), None);
        let s1 = ChainState {
            seq: 1,
            hash: "a".repeat(64),
        };
        let mut writer = Head::open(&head).unwrap();
        writer.write(&s1, false).unwrap();
        assert_eq!(read(&head).unwrap(), Some(s1.clone()));
        let s2 = ChainState {
            seq: 2,
            hash: "b".repeat(64),
        };
        writer.write(&s2, true).unwrap();
        assert_eq!(read(&head).unwrap(), Some(s2.clone()));
        assert!(disagreement(&s2, &s2).is_none());
        assert!(disagreement(&s1, &s2).unwrap().contains("seq 1"));
        // Rewritten in place (the same file: a mask bound over it stays), at a fixed size.
        use std::os::unix::fs::MetadataExt;
        let ino = std::fs::metadata(&head).unwrap().ino();
        writer.write(&s1, false).unwrap();
        assert_eq!(std::fs::metadata(&head).unwrap().ino(), ino);
        assert_eq!(std::fs::metadata(&head).unwrap().len(), HEAD_SIZE as u64);
        assert_eq!(read(&head).unwrap(), Some(s1.clone()));
        // Deleted behind the writer's back: the next write puts it back.
        std::fs::remove_file(&head).unwrap();
        writer.write(&s2, false).unwrap();
        assert_eq!(read(&head).unwrap(), Some(s2.clone()));
        // Replaced by another file: the next write overwrites the one the path names.
        let forged = d.path().join("forged");
        std::fs::write(&forged, b"{\"seq\":9,\"hash\":\"f\"}").unwrap();
        std::fs::rename(&forged, &head).unwrap();
        writer.write(&s1, false).unwrap();
        assert_eq!(read(&head).unwrap(), Some(s1.clone()));
        // A longer head file (not written here) is cut to size when opened, so the next
        // write leaves no stale tail after the padding.
        drop(writer);
        std::fs::write(&head, vec![b'x'; 3 * HEAD_SIZE]).unwrap();
        Head::open(&head).unwrap().write(&s2, false).unwrap();
        assert_eq!(std::fs::metadata(&head).unwrap().len(), HEAD_SIZE as u64);
        assert_eq!(read(&head).unwrap(), Some(s2.clone()));
        // The log's directory renamed and another planted in its place, its head a symlink
        // to a file of the host's: the renamed directory is still the one written, and the
        // host's file is untouched.
        let state = d.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"the host's file").unwrap();
        let mut held = Head::open(&state.join("audit.jsonl.head")).unwrap();
        held.write(&s1, false).unwrap();
        let moved = d.path().join("moved");
        std::fs::rename(&state, &moved).unwrap();
        std::fs::create_dir(&state).unwrap();
        std::os::unix::fs::symlink(&victim, state.join("audit.jsonl.head")).unwrap();
        held.write(&s2, false).unwrap();
        assert_eq!(
            read(&moved.join("audit.jsonl.head")).unwrap(),
            Some(s2.clone())
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"the host's file");
        // The head itself replaced by a symlink, or a hard link, to the host's file: the
        // record fails and the file is untouched.
        let head_in = moved.join("audit.jsonl.head");
        std::fs::remove_file(&head_in).unwrap();
        std::os::unix::fs::symlink(&victim, &head_in).unwrap();
        let err = held.write(&s1, false).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        std::fs::remove_file(&head_in).unwrap();
        std::fs::hard_link(&victim, &head_in).unwrap();
        let err = held.write(&s1, false).unwrap_err().to_string();
        assert!(err.contains("2 link(s)"), "{err}");
        assert!(Head::open(&head_in).is_err(), "not opened afresh either");
        assert_eq!(std::fs::read(&victim).unwrap(), b"the host's file");
        std::fs::remove_file(&head_in).unwrap();
        std::fs::remove_dir_all(&moved).unwrap();
        std::fs::remove_dir_all(&state).unwrap();
        std::fs::remove_file(&victim).unwrap();
        // The directory gone: the write fails (the log is then poisoned), nothing is
        // written to a file no reader can find.
        let gone = d.path().join("gone");
        std::fs::create_dir(&gone).unwrap();
        let mut lost = Head::open(&gone.join("audit.jsonl.head")).unwrap();
        std::fs::remove_dir_all(&gone).unwrap();
        assert!(lost.write(&s1, false).is_err());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }
}
