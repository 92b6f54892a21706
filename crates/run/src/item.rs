//! One item of a suite or a fleet: a test command built from a file, run in this process
//! and isolated by catching its failure (an error or a panic), which is recorded for that
//! item while the others go on.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::measure::{MeasureError, Measured};

/// One run of a suite or fleet file.
#[derive(Debug, Clone, PartialEq)]
pub struct Item<T> {
    /// Stable across runs of the same file: what `--resume` matches.
    pub key: String,
    /// The command's words after `sonde` (`ping 198.18.0.2 --udp`), for messages.
    pub words: Vec<String>,
    /// What runs: the caller's build of `words`.
    pub built: T,
}

impl<T> Item<T> {
    /// `TYPE HOST`, for a progress line.
    pub fn name(&self) -> String {
        self.words[..2.min(self.words.len())].join(" ")
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Stored,
    AlreadyStored,
    Failed(String),
}

impl Outcome {
    pub fn describe(&self) -> String {
        match self {
            Outcome::Stored => "stored".into(),
            Outcome::AlreadyStored => "already stored".into(),
            Outcome::Failed(why) => format!("failed: {why}"),
        }
    }
}

/// Runs `measure`, turning an error, a run cut short or a panic into `Failed`.
pub fn attempt(measure: impl FnOnce() -> Result<Measured, MeasureError>) -> Outcome {
    match catch_unwind(AssertUnwindSafe(measure)) {
        Ok(Ok(m)) if m.partial() => {
            let why: Vec<&str> = m
                .docs
                .iter()
                .filter_map(|d| d.end.error.as_deref())
                .collect();
            Outcome::Failed(format!("cut short: {}", why.join("; ")))
        }
        Ok(Ok(_)) => Outcome::Stored,
        Ok(Err(e)) => Outcome::Failed(e.to_string()),
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            Outcome::Failed(format!("panicked: {what}"))
        }
    }
}
