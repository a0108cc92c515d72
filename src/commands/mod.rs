//! One module per CLI command: its flags (clap `Args`) and its entry point. Commands are the
//! edge where `anyhow` context is added; they return the process exit code.

pub mod annotate;
pub mod approve;
pub mod audit;
pub mod bench_client;
pub mod bench_http;
pub mod check;
pub mod demo;
pub mod fs_server;
pub mod pins;
pub mod policy;
pub mod prefetch;
pub mod profiles;
pub mod run;
pub mod serve;
mod supervise;

use std::process::ExitCode;

/// An error that carries the exit code it must end the process with.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ExitWith {
    pub code: u8,
    pub message: String,
}

impl ExitWith {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        ExitWith {
            code,
            message: message.into(),
        }
    }
}

/// Builds the multi-threaded runtime the async commands share.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Builds a runtime that runs every task on the calling thread (blocking work still goes
/// to tokio's blocking pool), spinning with `busy` before it sleeps.
pub fn runtime_on_one_thread(
    busy: Option<&std::sync::Arc<crate::gateway::busy_poll::BusyPoll>>,
) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    if let Some(busy) = busy {
        busy.install(&mut builder);
    }
    Ok(builder.enable_all().build()?)
}

/// Maps a command's outcome to the process exit code, printing errors on stderr.
pub fn finish(outcome: anyhow::Result<ExitCode>) -> ExitCode {
    match outcome {
        Ok(code) => code,
        Err(e) => {
            let code = e.downcast_ref::<ExitWith>().map_or(1, |x| x.code);
            eprintln!("palisade: {}", error_text(&e));
            ExitCode::from(code)
        }
    }
}

/// An error and its causes as one line, `: `-separated, leaving out a cause its error's own
/// message already says. Palisade's own errors say their cause in their message and do not
/// also chain it (the field is `cause`, never thiserror's `source`: the test below); the
/// filter is for errors of other crates that do both (`cannot read: No such file or
/// directory: No such file or directory`).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.ends_with(&text) && !out.contains(&format!("{text}:")) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod error_text_tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{path}: cannot read: {cause}")]
    struct Read {
        path: String,
        cause: std::io::Error,
    }

    /// A field named `source` (or marked `#[source]`) is chained by thiserror, so an error
    /// whose message also prints it says its cause twice under `{:#}` and `error_text`.
    #[test]
    fn no_error_of_ours_prints_a_cause_it_also_chains() {
        fn walk(dir: &std::path::Path, found: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, found);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    for (n, line) in text.lines().enumerate() {
                        let line = line.trim();
                        if line.starts_with("#[error(\"") && line.contains("{source") {
                            found.push(format!("{}:{}", path.display(), n + 1));
                        }
                    }
                }
            }
        }
        let mut found = Vec::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut found,
        );
        assert!(found.is_empty(), "name the field `cause`: {found:?}");
    }

    #[test]
    fn a_cause_already_said_is_not_said_again() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let said = io.to_string();
        let e = anyhow::Error::new(Read {
            path: "/p.json".into(),
            cause: io,
        })
        .context("cannot load the policy");
        assert_eq!(
            error_text(&e),
            format!("cannot load the policy: /p.json: cannot read: {said}")
        );
        // A cause not said yet is kept.
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_text(&e), "outer: inner");
    }
}
