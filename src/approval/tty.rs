//! `tty`: ask on the controlling terminal (`/dev/tty`), never on the MCP stdio. One question
//! at a time (a terminal cannot hold two conversations); only an explicit `y`/`yes` approves,
//! or `a` ("approve and remember") when the request offers a scope, which the prompt shows.
//! Input typed before a question is shown is discarded, and a withdrawn question (the call
//! was cancelled) stops reading before the next one is asked: an answer only ever answers the
//! question on the screen.

use std::io::{BufRead, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::termios::{tcflush, FlushArg};

use super::{Answer, Approver, ApproverKind, EscalationRequest};

/// How often a waiting question checks whether it was withdrawn.
const WITHDRAW_CHECK: Duration = Duration::from_millis(100);

pub struct TtyApprover {
    path: PathBuf,
    /// The turn at the terminal. Owned by the blocking reader, so it is released only when
    /// the reader has stopped, not when the asking future is dropped.
    one_at_a_time: Arc<tokio::sync::Mutex<()>>,
}

impl TtyApprover {
    /// The controlling terminal.
    pub fn controlling() -> Self {
        Self::with_path(PathBuf::from("/dev/tty"))
    }

    /// A specific terminal device (tests pass a pseudo-terminal).
    pub fn with_path(path: PathBuf) -> Self {
        TtyApprover {
            path,
            one_at_a_time: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// True when the terminal can be opened (used by `auto`).
    pub fn available(&self) -> bool {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .is_ok()
    }
}

impl Approver for TtyApprover {
    fn kind(&self) -> ApproverKind {
        ApproverKind::Tty
    }

    fn ask<'a>(&'a self, req: &'a EscalationRequest, timeout: Duration) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            let deadline = Instant::now() + timeout;
            let turn = self.one_at_a_time.clone().lock_owned().await;
            let path = self.path.clone();
            let question = question(req);
            let offered = req.remember_scope.is_some();
            // Set when this future ends, however it ends (answered, or dropped because the
            // chain timed out or the agent cancelled the call).
            let withdrawn = Arc::new(AtomicBool::new(false));
            let _withdraw = Withdraw(withdrawn.clone());
            let asked = tokio::task::spawn_blocking(move || {
                let _turn = turn;
                ask_blocking(&path, &question, offered, deadline, &withdrawn)
            })
            .await;
            match asked {
                Ok(answer) => answer,
                Err(e) => Answer::Deny(format!("terminal prompt failed: {e}")),
            }
        })
    }
}

/// Marks the question withdrawn when dropped.
struct Withdraw(Arc<AtomicBool>);

impl Drop for Withdraw {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The question on the screen. Everything from the request goes through
/// `display::describe_request`, which shows any character a terminal could act on as an escape.
fn question(req: &EscalationRequest) -> String {
    let choices = if req.remember_scope.is_some() {
        "(y once, a remember) "
    } else {
        ""
    };
    format!(
        "\n[palisade] approval needed\n{}Approve this call? {choices}[y/N] ",
        super::display::describe_request(req)
    )
}

fn ask_blocking(
    path: &std::path::Path,
    question: &str,
    offered: bool,
    deadline: Instant,
    withdrawn: &AtomicBool,
) -> Answer {
    let tty = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(t) => t,
        Err(e) => return Answer::Pass(format!("no terminal ({}: {e})", path.display())),
    };
    if withdrawn.load(Ordering::SeqCst) {
        return Answer::Deny("the question was withdrawn before it was asked".into());
    }
    // Type-ahead (or a late answer to a withdrawn question) must not answer this one.
    if let Err(e) = tcflush(&tty, FlushArg::TCIFLUSH) {
        tracing::debug!("cannot discard earlier terminal input: {e}");
    }
    let mut writer = &tty;
    if let Err(e) = writer
        .write_all(question.as_bytes())
        .and_then(|_| writer.flush())
    {
        return Answer::Pass(format!("cannot write to the terminal: {e}"));
    }
    // Wait for input until the deadline (the whole configured timeout: it may exceed what
    // one poll can take), in slices so a withdrawn question stops reading promptly.
    loop {
        if withdrawn.load(Ordering::SeqCst) {
            let _ = writer.write_all(b"\n[palisade] question withdrawn: the call was cancelled\n");
            return Answer::Deny("the question was withdrawn".into());
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            let _ = writer.write_all(b"\n[palisade] no answer in time: denied\n");
            return Answer::Deny("no answer at the terminal in time".into());
        }
        let wait = PollTimeout::try_from(remaining.min(WITHDRAW_CHECK)).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(tty.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, wait) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => break,
            Err(e) => return Answer::Deny(format!("terminal poll failed: {e}")),
        }
    }
    if withdrawn.load(Ordering::SeqCst) {
        // Leave the line unread; the next question discards it before it is shown.
        let _ = writer.write_all(b"\n[palisade] question withdrawn: the call was cancelled\n");
        return Answer::Deny("the question was withdrawn".into());
    }
    let mut line = String::new();
    if let Err(e) = std::io::BufReader::new(&tty).read_line(&mut line) {
        return Answer::Deny(format!("cannot read the terminal: {e}"));
    }
    tracing::debug!(answer = %line.trim().escape_debug(), "terminal answer");
    read_answer(&line, offered)
}

/// Only an explicit yes approves; `a` remembers only when a scope was offered (otherwise it
/// was not among the choices shown, so it is not a yes).
fn read_answer(line: &str, offered: bool) -> Answer {
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Answer::Approve,
        "a" | "always" if offered => Answer::ApproveAndRemember,
        other => Answer::Deny(format!(
            "denied at the terminal (answered `{}`)",
            super::display::terminal_safe(other)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::pty::openpty;
    use std::io::Read;

    fn req() -> EscalationRequest {
        EscalationRequest::new(
            "fs",
            "write",
            serde_json::json!({"path": "/tmp/x"}),
            "needs approval",
            serde_json::json!({}),
        )
    }

    /// Answers `reply` on the pty master once the question has been printed.
    /// Returns what was shown and the master end, which must stay open until the answer has
    /// been read (closing it hangs up the terminal and discards pending input).
    fn human(
        master: std::os::fd::OwnedFd,
        reply: &'static [u8],
    ) -> std::thread::JoinHandle<(String, std::fs::File)> {
        std::thread::spawn(move || {
            let mut f = std::fs::File::from(master);
            let mut seen = Vec::new();
            let mut buf = [0u8; 512];
            while !String::from_utf8_lossy(&seen).contains("[y/N]") {
                let n = f.read(&mut buf).unwrap();
                seen.extend_from_slice(&buf[..n]);
            }
            f.write_all(reply).unwrap();
            (String::from_utf8_lossy(&seen).into_owned(), f)
        })
    }

    fn slave_path(pty: &nix::pty::OpenptyResult) -> PathBuf {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd())).unwrap()
    }

    #[tokio::test]
    async fn yes_approves_through_a_pseudo_terminal() {
        let pty = openpty(None, None).unwrap();
        let approver = TtyApprover::with_path(slave_path(&pty));
        let h = human(pty.master, b"yes\n");
        let answer = approver.ask(&req(), Duration::from_secs(10)).await;
        let (shown, _master) = h.join().unwrap();
        assert_eq!(answer, Answer::Approve);
        assert!(
            shown.contains("server: fs") && shown.contains("/tmp/x"),
            "{shown}"
        );
        drop(pty.slave);
    }

    #[tokio::test]
    async fn anything_but_yes_denies() {
        let pty = openpty(None, None).unwrap();
        let approver = TtyApprover::with_path(slave_path(&pty));
        let h = human(pty.master, b"sure\n");
        let answer = approver.ask(&req(), Duration::from_secs(10)).await;
        h.join().unwrap();
        assert!(matches!(answer, Answer::Deny(_)));
        drop(pty.slave);
    }

    /// Regression: a line typed before the question was shown used to answer it.
    #[tokio::test]
    async fn type_ahead_does_not_answer_the_question() {
        let pty = openpty(None, None).unwrap();
        let approver = TtyApprover::with_path(slave_path(&pty));
        let mut master = std::fs::File::from(pty.master);
        master.write_all(b"y\n").unwrap();
        let h = human(master.try_clone().unwrap().into(), b"n\n");
        let answer = approver.ask(&req(), Duration::from_secs(10)).await;
        h.join().unwrap();
        assert!(matches!(answer, Answer::Deny(_)), "{answer:?}");
        drop(pty.slave);
    }

    /// Regression: a withdrawn question kept reading the terminal and ate the answer to the
    /// next one.
    #[tokio::test]
    async fn a_withdrawn_question_frees_the_terminal_for_the_next() {
        let pty = openpty(None, None).unwrap();
        let approver = TtyApprover::with_path(slave_path(&pty));
        let mut master = std::fs::File::from(pty.master);
        let r = req();
        let mut first = approver.ask(&r, Duration::from_secs(30));
        // Keep the first question going until it is on the screen, then drop it.
        let mut seen = Vec::new();
        let mut buf = [0u8; 512];
        let mut reader = master.try_clone().unwrap();
        let shown = std::thread::spawn(move || {
            while !String::from_utf8_lossy(&seen).contains("[y/N]") {
                let n = reader.read(&mut buf).unwrap();
                seen.extend_from_slice(&buf[..n]);
            }
        });
        while !shown.is_finished() {
            tokio::select! {
                a = &mut first => panic!("nobody answered, yet: {a:?}"),
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
        drop(first);
        let h = human(master.try_clone().unwrap().into(), b"y\n");
        let answer = approver.ask(&req(), Duration::from_secs(10)).await;
        let (screen, _m) = h.join().unwrap();
        assert_eq!(answer, Answer::Approve, "{screen}");
        master.flush().unwrap();
        drop(pty.slave);
    }

    #[tokio::test]
    async fn a_remembers_only_what_was_offered_and_shown() {
        let scope = crate::approval::RememberScope {
            server: "fs".into(),
            tool: "write".into(),
            dirs: vec![crate::approval::RememberedDir {
                path: "/tmp".into(),
                access: crate::sandbox::Access::Rw,
            }],
            domains: vec![],
        };
        let pty = openpty(None, None).unwrap();
        let approver = TtyApprover::with_path(slave_path(&pty));
        let h = human(pty.master, b"a\n");
        let answer = approver
            .ask(
                &req().with_remember_scope(Some(scope)),
                Duration::from_secs(10),
            )
            .await;
        let (shown, _master) = h.join().unwrap();
        assert_eq!(answer, Answer::ApproveAndRemember);
        assert!(
            shown.contains("approve and remember: every later call of fs/write in this session")
                && shown.contains("in /tmp (read-write)")
                && shown.contains("(y once, a remember) [y/N]"),
            "{shown}"
        );
        drop(pty.slave);
        // Without an offer, `a` is not a choice and not a yes.
        assert!(matches!(read_answer("a\n", false), Answer::Deny(_)));
        assert_eq!(read_answer("always\n", true), Answer::ApproveAndRemember);
        assert_eq!(read_answer("Y\n", true), Answer::Approve);
    }

    #[tokio::test]
    async fn no_terminal_passes_on() {
        let approver = TtyApprover::with_path(PathBuf::from("/nonexistent/tty"));
        assert!(!approver.available());
        assert!(matches!(
            approver.ask(&req(), Duration::from_secs(1)).await,
            Answer::Pass(_)
        ));
    }
}
