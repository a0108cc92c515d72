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

use std::os::unix::fs::OpenOptionsExt;
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

/// A head file held open by its log's writer. Each record checks that the path still names
/// the file held (one `stat`) and rewrites it through the kept descriptor (one positioned
/// write): no open or close per record. A head deleted, replaced or moved away behind the
/// gateway's back is opened again by its path and overwritten with the true state, as when
/// every record opened it, so the change is caught; a path that no longer resolves (the
/// log's directory removed or moved) fails the record, and the log with it.
pub struct Head {
    path: PathBuf,
    file: std::fs::File,
    /// The held file's device and inode.
    id: (u64, u64),
}

impl Head {
    /// Opens the head file at `path` for writing (created 0600 when missing). A longer file
    /// (not written by this module) is cut to `HEAD_SIZE`; the caller writes the head next.
    pub fn open(path: &Path) -> std::io::Result<Head> {
        use std::os::unix::fs::MetadataExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        let meta = file.metadata()?;
        if meta.len() > HEAD_SIZE as u64 {
            file.set_len(HEAD_SIZE as u64)?;
        }
        Ok(Head {
            path: path.to_path_buf(),
            file,
            id: (meta.dev(), meta.ino()),
        })
    }

    /// Rewrites the head with `state`: one positioned write of `HEAD_SIZE` bytes at offset 0
    /// of the file the path names (opened again when it is no longer the one held), flushed
    /// to disk with `sync`.
    pub fn write(&mut self, state: &ChainState, sync: bool) -> std::io::Result<()> {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let named = match std::fs::metadata(&self.path) {
            Ok(meta) => Some((meta.dev(), meta.ino())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        if named != Some(self.id) {
            *self = Head::open(&self.path)?;
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
        assert_eq!(read(&head).unwrap(), Some(s2));
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
