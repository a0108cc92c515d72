//! `tty`: ask on the controlling terminal (`/dev/tty`), never on the MCP stdio. One question
//! at a time (a terminal cannot hold two conversations); only an explicit `y`/`yes` approves.

use std::io::{BufRead, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::{Answer, Approver, ApproverKind, EscalationRequest};

pub struct TtyApprover {
    path: PathBuf,
    one_at_a_time: tokio::sync::Mutex<()>,
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
            one_at_a_time: tokio::sync::Mutex::new(()),
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
            let _turn = self.one_at_a_time.lock().await;
            let path = self.path.clone();
            let question = question(req);
            let asked =
                tokio::task::spawn_blocking(move || ask_blocking(&path, &question, deadline)).await;
            match asked {
                Ok(answer) => answer,
                Err(e) => Answer::Deny(format!("terminal prompt failed: {e}")),
            }
        })
    }
}

fn question(req: &EscalationRequest) -> String {
    format!(
        "\n[palisade] approval needed\n  server: {}\n  tool:   {}\n  args:   {}\n  why:    {}\nApprove this call? [y/N] ",
        req.server_name, req.tool_name, req.arguments, req.reason
    )
}

fn ask_blocking(path: &std::path::Path, question: &str, deadline: Instant) -> Answer {
    let tty = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(t) => t,
        Err(e) => return Answer::Pass(format!("no terminal ({}: {e})", path.display())),
    };
    let mut writer = &tty;
    if let Err(e) = writer
        .write_all(question.as_bytes())
        .and_then(|_| writer.flush())
    {
        return Answer::Pass(format!("cannot write to the terminal: {e}"));
    }
    // Wait for input without blocking past the deadline. The whole remaining time in one
    // poll (a u16 of milliseconds would end the wait after 65 s, long before the default
    // 300 s); a signal interrupting the poll just polls again for what is left.
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let wait = PollTimeout::try_from(remaining).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(tty.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, wait) {
            Ok(0) => {
                let _ = writer.write_all(b"\n[palisade] no answer in time: denied\n");
                return Answer::Deny("no answer at the terminal in time".into());
            }
            Ok(_) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Answer::Deny(format!("terminal poll failed: {e}")),
        }
    }
    let mut line = String::new();
    if let Err(e) = std::io::BufReader::new(&tty).read_line(&mut line) {
        return Answer::Deny(format!("cannot read the terminal: {e}"));
    }
    tracing::debug!(answer = %line.trim(), "terminal answer");
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Answer::Approve,
        other => Answer::Deny(format!("denied at the terminal (answered `{other}`)")),
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
