//! Checking a whole log: every line's own hash, and that each record follows the one before
//! it (`seq` one higher, `prevHash` equal to its hash). Reports every problem with its line.
//!
//! Reads the log; writes nothing.

use std::io::BufRead;

use super::chain::{self, ChainState};

/// One problem, with its 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub line: usize,
    pub message: String,
}

/// The outcome of a verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub records: usize,
    /// The chain's last hash: keep it elsewhere to detect records cut off the end later.
    pub last: ChainState,
    pub problems: Vec<Problem>,
}

pub fn verify(reader: impl BufRead) -> std::io::Result<Report> {
    let mut prev = ChainState::genesis();
    let mut problems = Vec::new();
    let mut records = 0;
    for (i, line) in reader.lines().enumerate() {
        let line = line?;
        let n = i + 1;
        // Every line is a record, a damaged one too (it was counted out, so a log of four
        // with one edited said "in 3 records").
        records += 1;
        match chain::open_line(&line) {
            Err(e) => {
                problems.push(Problem {
                    line: n,
                    message: e.to_string(),
                });
                // Resynchronise on the next intact record so later problems still show.
                prev = ChainState {
                    seq: prev.seq + 1,
                    hash: String::new(),
                };
            }
            Ok((seq, prev_hash, state)) => {
                let expected = prev.seq + 1;
                if seq > expected {
                    problems.push(Problem {
                        line: n,
                        message: format!(
                            "record seq {seq} follows seq {}: {} record(s) removed before this line",
                            prev.seq,
                            seq - expected
                        ),
                    });
                } else if seq < expected {
                    problems.push(Problem {
                        line: n,
                        message: format!(
                            "record seq {seq} follows seq {}: records reordered or duplicated",
                            prev.seq
                        ),
                    });
                } else if !prev.hash.is_empty() && prev_hash != prev.hash {
                    problems.push(Problem {
                        line: n,
                        message: "prevHash does not match the previous record: the chain was \
                                  altered before this line"
                            .into(),
                    });
                }
                prev = state;
            }
        }
    }
    Ok(Report {
        records,
        last: prev,
        problems,
    })
}
