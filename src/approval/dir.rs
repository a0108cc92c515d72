//! IronCurtain-compatible file IPC. The gateway writes `request-<id>.json` (atomically:
//! temporary file, then rename; mode 0600) and waits for `response-<id>.json` holding
//! `{"decision": "approved"|"denied"}`. It watches the directory with inotify and also
//! polls, so a missed or unsupported event only costs latency. Anything malformed,
//! unreadable or late is a denial. Both files are removed afterwards. Palisade's extension:
//! the request may carry `rememberScope`, and `"remember": true` next to `approved` accepts it
//! (responses without the field, as IronCurtain writes them, approve once).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use serde::Deserialize;
use tokio::io::unix::AsyncFd;

use super::{Answer, Approver, ApproverKind, EscalationRequest};

/// How often the directory is polled in addition to inotify.
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// Responses larger than this are malformed by definition.
const MAX_RESPONSE_BYTES: u64 = 64 * 1024;

pub struct DirApprover {
    dir: PathBuf,
    /// Request writes started and not yet finished (they run on blocking threads and may
    /// outlive the call that started them).
    writes: Arc<AtomicUsize>,
}

impl DirApprover {
    pub fn new(dir: PathBuf) -> Self {
        DirApprover {
            dir,
            writes: Arc::default(),
        }
    }

    /// How many request writes are still running (the tests wait for none before they look).
    #[cfg(test)]
    fn writes_in_flight(&self) -> usize {
        self.writes.load(Ordering::SeqCst)
    }

    fn request_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("request-{id}.json"))
    }

    fn response_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("response-{id}.json"))
    }
}

impl Approver for DirApprover {
    fn kind(&self) -> ApproverKind {
        ApproverKind::Dir
    }

    fn ask<'a>(&'a self, req: &'a EscalationRequest, timeout: Duration) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            let id = &req.escalation_id;
            if !is_safe_id(id) {
                return Answer::Deny("escalation id is not a plain identifier".into());
            }
            let request = self.request_path(id);
            let response = self.response_path(id);
            let body = match serde_json::to_vec_pretty(req) {
                Ok(b) => b,
                Err(e) => return Answer::Deny(format!("cannot encode the request: {e}")),
            };
            // Both files go when this future ends, however it ends, even while the request
            // is still being written: a cancelled call must not leave its question behind
            // (the write runs on a blocking thread and finishes after this future is gone).
            let abandoned = Arc::new(AtomicBool::new(false));
            let _cleanup = Cleanup {
                request: request.clone(),
                response: response.clone(),
                abandoned: abandoned.clone(),
            };
            let dir = self.dir.clone();
            let req_path = request.clone();
            let writes = self.writes.clone();
            writes.fetch_add(1, Ordering::SeqCst);
            let written = tokio::task::spawn_blocking(move || {
                let result = write_atomically(&dir, &req_path, &body);
                // Checked after the rename: if the guard ran before it, the file is ours to
                // remove (the guard sets the flag before it unlinks).
                if abandoned.load(Ordering::SeqCst) {
                    let _ = std::fs::remove_file(&req_path);
                }
                writes.fetch_sub(1, Ordering::SeqCst);
                result
            })
            .await;
            match written {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Answer::Deny(format!(
                        "cannot write the request to {}: {e}",
                        self.dir.display()
                    ))
                }
                Err(e) => return Answer::Deny(format!("request writer failed: {e}")),
            }
            tracing::warn!(
                escalation = %id, dir = %self.dir.display(),
                "approval needed for {}__{}: run `palisade approve --dir {}`",
                req.server_name, req.tool_name, self.dir.display()
            );
            let answer = match tokio::time::timeout(timeout, wait_for(&self.dir, &response)).await {
                Ok(answer) => answer,
                Err(_) => Answer::Deny(format!(
                    "no response file within {} s (timed out)",
                    timeout.as_secs()
                )),
            };
            answer
        })
    }
}

/// Removes the request and response files when the wait ends: answered, timed out here, or
/// dropped because the chain's own timeout (which fires first, with the same deadline) or
/// the agent's cancellation ended the call. A dropped future runs no more `.await`s, so the
/// removal is synchronous: two unlinks in one local directory, not worth a blocking task.
struct Cleanup {
    request: PathBuf,
    response: PathBuf,
    /// Set before the files are removed, for a request write still in flight.
    abandoned: Arc<AtomicBool>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.abandoned.store(true, Ordering::SeqCst);
        let _ = std::fs::remove_file(&self.request);
        let _ = std::fs::remove_file(&self.response);
    }
}

/// Ids come from `Uuid::new_v4`; anything else must not become part of a file name.
fn is_safe_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// Waits until `response` exists, then reads it.
async fn wait_for(dir: &Path, response: &Path) -> Answer {
    let watch = match watch_dir(dir) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::debug!(
                "inotify unavailable for {} ({e}); polling only",
                dir.display()
            );
            None
        }
    };
    loop {
        if tokio::fs::try_exists(response).await.unwrap_or(false) {
            return read_response(response).await;
        }
        match &watch {
            Some(fd) => {
                tokio::select! {
                    ready = fd.readable() => {
                        if let Ok(mut guard) = ready {
                            // Drain events; which file changed is re-checked above.
                            let _ = guard.get_inner().read_events();
                            guard.clear_ready();
                        }
                    }
                    _ = tokio::time::sleep(POLL_INTERVAL) => {}
                }
            }
            None => tokio::time::sleep(POLL_INTERVAL).await,
        }
    }
}

fn watch_dir(dir: &Path) -> std::io::Result<AsyncFd<InotifyFd>> {
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
    inotify.add_watch(
        dir,
        AddWatchFlags::IN_CLOSE_WRITE | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_CREATE,
    )?;
    // SAFETY: `InotifyFd` owns the inotify descriptor (nix's `Inotify` holds an `OwnedFd`),
    // so it stays open and unchanged for the whole life of the `AsyncFd` that owns it.
    unsafe { AsyncFd::register(InotifyFd(inotify)) }.map_err(|e| e.into_parts().1)
}

/// `AsyncFd` wants `AsRawFd`; nix's `Inotify` offers `AsFd`.
struct InotifyFd(Inotify);

impl InotifyFd {
    fn read_events(&self) -> nix::Result<Vec<nix::sys::inotify::InotifyEvent>> {
        self.0.read_events()
    }
}

impl std::os::fd::AsRawFd for InotifyFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.0.as_fd().as_raw_fd()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResponseFile {
    decision: String,
    /// Palisade's extension: `true` with `approved` remembers the scope the request offered
    /// (`rememberScope`). IronCurtain's responses do not carry it.
    #[serde(default)]
    remember: bool,
}

async fn read_response(path: &Path) -> Answer {
    // A writer that has not renamed into place yet may leave a partial file; the IronCurtain
    // contract is atomic rename, so a partial read is treated as malformed (denied).
    let meta = match tokio::fs::symlink_metadata(path).await {
        Ok(m) => m,
        Err(e) => return Answer::Deny(format!("response unreadable: {e}")),
    };
    if !meta.is_file() || meta.len() > MAX_RESPONSE_BYTES {
        return Answer::Deny("response is not a small regular file".into());
    }
    let text = match tokio::fs::read(path).await {
        Ok(t) => t,
        Err(e) => return Answer::Deny(format!("response unreadable: {e}")),
    };
    match serde_json::from_slice::<ResponseFile>(&text) {
        Ok(r) if r.decision == "approved" && r.remember => Answer::ApproveAndRemember,
        Ok(r) if r.decision == "approved" => Answer::Approve,
        Ok(r) if r.decision == "denied" => Answer::Deny("denied by a human (file IPC)".into()),
        Ok(r) => Answer::Deny(format!(
            "malformed response: decision `{}` is neither approved nor denied",
            r.decision
        )),
        Err(e) => Answer::Deny(format!("malformed response: {e}")),
    }
}

/// Writes `body` to `path` through a temporary file in the same directory and a rename, so
/// a reader never sees a partial file. Mode 0600; the directory is created 0700 if missing.
pub fn write_atomically(dir: &Path, path: &Path, body: &[u8]) -> std::io::Result<()> {
    crate::private_dir::create(dir)?;
    let tmp = dir.join(format!(".tmp-{}", uuid::Uuid::new_v4()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(body)?;
        f.sync_all()?;
        // Closed before the rename: a watcher of the final name sees it appear complete and
        // closed (moved_to), never an open file (a close_write after it).
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A request waiting in an approval directory (for `palisade approve`).
#[derive(Debug, Clone)]
pub struct PendingRequest {
    pub path: PathBuf,
    pub request: EscalationRequest,
}

/// A request file in an approval directory that could not be read or parsed (named by its
/// file name).
#[derive(Debug, thiserror::Error)]
pub enum UnreadableRequest {
    #[error("{name}: {cause}")]
    Read { name: String, cause: std::io::Error },
    #[error("{name}: {cause}")]
    Parse {
        name: String,
        cause: serde_json::Error,
    },
}

impl PendingRequest {
    /// Lists requests in `dir` that have no response yet, oldest first. Unparsable request
    /// files are reported as errors, not skipped silently.
    pub fn list(dir: &Path) -> std::io::Result<Vec<Result<PendingRequest, UnreadableRequest>>> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name
                .strip_prefix("request-")
                .and_then(|n| n.strip_suffix(".json"))
            else {
                continue;
            };
            if dir.join(format!("response-{id}.json")).exists() {
                continue;
            }
            let modified = entry.metadata().and_then(|m| m.modified()).ok();
            let parsed = std::fs::read(entry.path())
                .map_err(|source| UnreadableRequest::Read {
                    name: name.clone(),
                    cause: source,
                })
                .and_then(|b| {
                    serde_json::from_slice::<EscalationRequest>(&b).map_err(|source| {
                        UnreadableRequest::Parse {
                            name,
                            cause: source,
                        }
                    })
                })
                .map(|request| PendingRequest {
                    path: entry.path(),
                    request,
                });
            found.push((modified, parsed));
        }
        found.sort_by_key(|(m, _)| *m);
        Ok(found.into_iter().map(|(_, p)| p).collect())
    }
}

/// Writes the response for `escalation_id` in `dir`.
pub fn write_response(dir: &Path, escalation_id: &str, approved: bool) -> std::io::Result<()> {
    write_response_remembering(dir, escalation_id, approved, false)
}

/// Writes the response for `escalation_id` in `dir`; `remember` (with `approved`) asks the
/// gateway to remember the scope the request offered for the rest of its session.
pub fn write_response_remembering(
    dir: &Path,
    escalation_id: &str,
    approved: bool,
    remember: bool,
) -> std::io::Result<()> {
    if !is_safe_id(escalation_id) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "escalation id is not a plain identifier",
        ));
    }
    let mut body = serde_json::json!({"decision": if approved {"approved"} else {"denied"}});
    if approved && remember {
        body["remember"] = serde_json::Value::Bool(true);
    }
    write_atomically(
        dir,
        &dir.join(format!("response-{escalation_id}.json")),
        body.to_string().as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> EscalationRequest {
        EscalationRequest::new(
            "fs",
            "write",
            serde_json::json!({"path": "/x"}),
            "writes outside the sandbox need approval",
            serde_json::json!({}),
        )
    }

    /// Plays the human: waits for the request file, then writes `response` for it.
    async fn answer_with(dir: PathBuf, response: &'static [u8]) {
        loop {
            if let Ok(Some(p)) = PendingRequest::list(&dir).map(|v| v.into_iter().next()) {
                let id = p.unwrap().request.escalation_id;
                write_atomically(&dir, &dir.join(format!("response-{id}.json")), response).unwrap();
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A call cancelled while its request file is still being written leaves no question
    /// behind: the write finishes on a blocking thread after the approver's future is gone
    /// (the race behind a flaky `approvals` test under load).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_question_dropped_mid_write_is_not_left_behind() {
        for _ in 0..50 {
            let dir = tempfile::tempdir().unwrap();
            let approver = DirApprover::new(dir.path().to_path_buf());
            let r = req();
            {
                let mut ask = approver.ask(&r, Duration::from_secs(10));
                // One poll starts the blocking write; the future is then dropped, as the
                // pipeline's select drops it when the agent cancels.
                let _ = futures::poll!(&mut ask);
            }
            // The abandoned write may still be running on a blocking thread (syncing, for long
            // under load): the directory is looked at once it has finished. Without the
            // guard's flag the request stays and this fails.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while approver.writes_in_flight() > 0 && std::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert_eq!(approver.writes_in_flight(), 0, "the write never finished");
            let left: Vec<_> = std::fs::read_dir(dir.path())
                .map(|d| d.flatten().map(|e| e.file_name()).collect())
                .unwrap_or_default();
            assert!(left.is_empty(), "left behind: {left:?}");
        }
    }

    async fn run(response: &'static [u8]) -> (Answer, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let approver = DirApprover::new(dir.path().to_path_buf());
        let human = tokio::spawn(answer_with(dir.path().to_path_buf(), response));
        let r = req();
        let answer = approver.ask(&r, Duration::from_secs(10)).await;
        human.await.unwrap();
        (answer, dir)
    }

    #[tokio::test]
    async fn approved_response_approves_and_both_files_are_removed() {
        let (answer, dir) = run(br#"{"decision": "approved"}"#).await;
        assert_eq!(answer, Answer::Approve);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn denied_and_malformed_responses_deny() {
        let (answer, _d) = run(br#"{"decision": "denied"}"#).await;
        assert!(matches!(answer, Answer::Deny(_)));
        let (answer, _d) = run(br#"{"decision": "yes please"}"#).await;
        assert!(
            matches!(answer, Answer::Deny(ref m) if m.contains("malformed")),
            "{answer:?}"
        );
        let (answer, _d) = run(b"not json").await;
        assert!(
            matches!(answer, Answer::Deny(ref m) if m.contains("malformed")),
            "{answer:?}"
        );
    }

    #[tokio::test]
    async fn remember_is_read_only_with_an_approval_and_must_be_a_boolean() {
        let (answer, _d) = run(br#"{"decision": "approved", "remember": true}"#).await;
        assert_eq!(answer, Answer::ApproveAndRemember);
        let (answer, _d) = run(br#"{"decision": "approved", "remember": false}"#).await;
        assert_eq!(answer, Answer::Approve);
        let (answer, _d) = run(br#"{"decision": "denied", "remember": true}"#).await;
        assert!(matches!(answer, Answer::Deny(_)), "{answer:?}");
        let (answer, _d) = run(br#"{"decision": "approved", "remember": "yes"}"#).await;
        assert!(
            matches!(answer, Answer::Deny(ref m) if m.contains("malformed")),
            "{answer:?}"
        );
    }

    #[test]
    fn responses_written_for_a_person_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        write_response_remembering(dir.path(), "a-1", true, true).unwrap();
        write_response_remembering(dir.path(), "a-2", false, true).unwrap();
        let read = |id: &str| {
            serde_json::from_slice::<serde_json::Value>(
                &std::fs::read(dir.path().join(format!("response-{id}.json"))).unwrap(),
            )
            .unwrap()
        };
        assert_eq!(
            read("a-1"),
            serde_json::json!({"decision": "approved", "remember": true})
        );
        assert_eq!(read("a-2"), serde_json::json!({"decision": "denied"}));
    }

    #[tokio::test]
    async fn no_response_times_out_denied_and_request_removed() {
        let dir = tempfile::tempdir().unwrap();
        let approver = DirApprover::new(dir.path().to_path_buf());
        // A response for some other id must not count.
        write_response(dir.path(), "0000-unknown", true).unwrap();
        let answer = approver.ask(&req(), Duration::from_millis(600)).await;
        assert!(
            matches!(answer, Answer::Deny(ref m) if m.contains("timed out")),
            "{answer:?}"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, vec!["response-0000-unknown.json".to_string()]);
    }

    /// Regression: the chain's timeout drops this future before its own timeout fires, and
    /// the request file used to stay behind for `palisade approve` to list forever.
    #[tokio::test]
    async fn a_dropped_wait_removes_the_request() {
        let dir = tempfile::tempdir().unwrap();
        let approver = DirApprover::new(dir.path().to_path_buf());
        let r = req();
        let mut ask = approver.ask(&r, Duration::from_secs(30));
        // Keep the wait going until its request file is there (so this cannot pass because
        // nothing was written yet), then drop it as an outer timeout would.
        while PendingRequest::list(dir.path()).unwrap().is_empty() {
            tokio::select! {
                a = &mut ask => panic!("nobody answered, yet: {a:?}"),
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
        drop(ask);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn request_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("request-x.json");
        write_atomically(dir.path(), &p, b"{}").unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
