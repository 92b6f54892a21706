//! One item of a suite or a fleet: a test command built from a file, run in this process
//! and isolated by catching its failure (an error or a panic), which is recorded for that
//! item while the others go on.

use std::panic::{catch_unwind, AssertUnwindSafe};

use sonde_probe::tune::Goal;

use crate::measure::{Look, MeasureError, Measured, Measurement, Output, Plan, Target};
use crate::signals::Interrupt;
use crate::tune::Tuned;

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

/// A typed test request, as a suite or fleet item builds it: what to measure, where, and
/// the goal the host is tuned for around it.
pub struct Request {
    pub plan: Plan,
    pub target: Target,
    pub tune: Option<Goal>,
}

impl Request {
    /// Runs in this process, tuned for its length when asked; its failure caught and
    /// recorded (`attempt`).
    pub fn run(
        self,
        command: &str,
        look: &dyn Look,
        out: &dyn Output,
        interrupt: &Interrupt,
    ) -> Outcome {
        attempt(|| {
            let _tuned = self.tune.map(Tuned::apply).transpose()?;
            let m = Measurement {
                target: &self.target,
                command,
                look,
                out,
                interrupt,
            };
            m.run(self.plan)
        })
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
