//! A test command's output on this terminal: its live lines or JSON events, its documents
//! kept in the store, then its JSON written to `--output` and printed (`--json`) or its
//! human text; and a suite's progress bar ([`SuiteBar`]). The binary maps its flags to
//! [`Shown`] and the result to an exit code.

use std::io::Write;
use std::path::PathBuf;

use sonde_probe::tune::Goal;
use sonde_report::safe;
use sonde_results::Document;

use crate::measure::{Live, MeasureError, Measured, Measurement, Output, Plan, Target};
use crate::report_look::Report;
use crate::signals::Interrupt;
use crate::stored::{write_atomically, WriteError};
use crate::tune::{TuneError, Tuned};

/// The output flags every test command shares.
#[derive(Debug, Clone, Default)]
pub struct Shown {
    /// `--json`: the document, and nothing else, on stdout.
    pub json: bool,
    /// `--json-stream`: an event per interval and one at the end.
    pub json_stream: bool,
    /// `--output`: the document's file.
    pub output: Option<PathBuf>,
    /// `--db`, `--no-save`, `--label`: where and whether the run is kept.
    pub db: Option<PathBuf>,
    pub no_save: bool,
    pub label: Option<String>,
}

impl Shown {
    /// No human text on stdout.
    pub fn quiet(&self) -> bool {
        self.json || self.json_stream
    }

    /// Keeps a run in the store (unless `--no-save`), as [`crate::keep::save_run`] says.
    pub fn save_run(&self, doc: &Document) {
        if !self.no_save {
            crate::keep::save_run(self.db.as_deref(), self.label.as_deref(), doc);
        }
    }
}

/// Why a test command's documents could not be printed or written.
#[derive(Debug, thiserror::Error)]
pub enum ShowError {
    #[error(transparent)]
    Measure(#[from] MeasureError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Stdout(#[from] std::io::Error),
}

/// This terminal and the store, as `--json`, `--json-stream` and `--no-save` say.
pub struct Terminal<'a>(pub &'a Shown);

impl Output for Terminal<'_> {
    fn say(&self, text: &str) {
        if !self.0.quiet() {
            print!("{}", safe::terminal(text));
        }
    }

    fn interval(&self, live: Live<'_>, line: &dyn Fn() -> String) {
        if self.0.json_stream {
            let event = match live {
                Live::Test(l) => sonde_report::events::interval(l.client, l.server),
                Live::Watch(i) => sonde_report::events::watch_interval(i),
            };
            println!("{}", safe::json(&event));
        } else if !self.0.quiet() {
            println!("{}", safe::terminal(&line()));
        }
    }

    fn keep(&self, doc: &Document) {
        self.0.save_run(doc);
        if self.0.json_stream {
            println!("{}", safe::json(&sonde_report::events::end(doc)));
        }
    }
}

/// Applies `--tune` for the length of a test; the guard restores on every exit path.
pub fn tuned(goal: Option<Goal>, quiet: bool) -> Result<Option<Tuned>, TuneError> {
    let Some(goal) = goal else { return Ok(None) };
    let (guard, changes) = Tuned::apply(goal)?;
    if !quiet {
        for c in &changes {
            println!(
                "{}",
                safe::terminal(&format!("--tune: changed {}", c.describe()))
            );
        }
    }
    Ok(Some(guard))
}

/// Runs `plan` through the pipeline with this terminal as its output.
pub fn measure(
    plan: Plan,
    target: &Target,
    shown: &Shown,
    command: &str,
    interrupt: &Interrupt,
) -> Result<Measured, MeasureError> {
    let m = Measurement {
        target,
        command,
        look: &Report,
        out: &Terminal(shown),
        interrupt,
    };
    m.run(plan)
}

/// A test command's plan measured and its documents shown (one document, or an array of
/// them and a comparison of their receive modes); whether the result is partial.
pub fn test(
    plan: Plan,
    target: &Target,
    shown: &Shown,
    command: &str,
    interrupt: &Interrupt,
) -> Result<bool, ShowError> {
    let m = measure(plan, target, shown, command, interrupt)?;
    // One document per test; several receive modes make an array of them.
    let text = match &m.docs[..] {
        [one] => sonde_report::json(one),
        docs => format!("{}\n", serde_json::to_string_pretty(docs)?),
    };
    let human = (!shown.json && m.docs.len() > 1).then(|| sonde_report::look::comparison(&m.docs));
    emit(&text, human, shown)?;
    Ok(m.partial())
}

/// How a test command that measured ended, for its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Whole,
    /// Cut short (Ctrl-C, an agent gone): what was measured is kept.
    Partial,
    /// Nothing answered: a failure, as a missing agent is to `sonde ping` (the run is
    /// still printed and stored, saying why).
    Unanswered,
}

impl Ended {
    fn of(partial: bool) -> Ended {
        match partial {
            true => Ended::Partial,
            false => Ended::Whole,
        }
    }
}

/// `sonde stamp`: its plan measured and its document shown.
pub fn stamp(
    plan: Plan,
    target: &Target,
    shown: &Shown,
    command: &str,
    interrupt: &Interrupt,
) -> Result<Ended, ShowError> {
    let m = measure(plan, target, shown, command, interrupt)?;
    emit(&sonde_report::json(&m.docs[0]), None, shown)?;
    Ok(match m.docs[0].end.stamp().and_then(|s| s.no_answer) {
        Some(_) => Ended::Unanswered,
        None => Ended::of(m.partial()),
    })
}

/// `sonde watch`: its plan measured on this host and its document shown; the exit code
/// the command gave, or `partial_code` when Ctrl-C cut it before it gave one.
pub fn watch(
    plan: Plan,
    shown: &Shown,
    command: &str,
    interrupt: &Interrupt,
    partial_code: u8,
) -> Result<u8, ShowError> {
    let target = Target {
        host: String::new(),
        from: None,
        port: 0,
        key: None,
        fleet: None,
    };
    let m = measure(plan, &target, shown, command, interrupt)?;
    let (doc, status) = (&m.docs[0], m.status.expect("a watch has a status"));
    emit(&sonde_report::json(doc), None, shown)?;
    Ok(crate::watch::exit_code(
        status,
        doc.end.partial,
        partial_code,
    ))
}

/// Writes the JSON to `--output`, prints JSON or the human text.
pub fn emit(json_text: &str, human: Option<String>, shown: &Shown) -> Result<(), ShowError> {
    if let Some(path) = &shown.output {
        write_atomically(path, json_text.as_bytes())?;
    }
    if shown.json {
        print!("{}", safe::json(json_text));
    } else if let Some(h) = human {
        print!("{}", safe::terminal(&h));
    }
    std::io::stdout().flush()?;
    Ok(())
}

/// The suite's progress bar on stderr, drawn once the suite knows its items.
#[derive(Default)]
pub struct SuiteBar(std::cell::OnceCell<indicatif::ProgressBar>);

impl crate::suite::Progress for SuiteBar {
    fn begin(&self, items: usize) {
        let bar = indicatif::ProgressBar::new(items as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} runs, ETA {eta} {msg}")
                .expect("a valid template"),
        );
        let _ = self.0.set(bar);
    }

    fn item(&self, name: &str) {
        let name = safe::line(name).into_owned();
        self.0
            .get()
            .into_iter()
            .for_each(|b| b.set_message(name.clone()));
    }

    fn done(&self) {
        self.0.get().into_iter().for_each(|b| b.inc(1));
    }

    fn end(&self) {
        self.0.get().into_iter().for_each(|b| b.finish_and_clear());
    }
}

/// A usage error on one line: the command-line parser's rendered message (which names the
/// flag), without its usage, tips and blank lines.
pub fn usage_line(rendered: &str) -> String {
    let words: Vec<&str> = rendered
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("tip:"))
        .collect();
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's message keeps its words, on one line; its tip and usage go.
    #[test]
    fn a_usage_error_is_one_line_naming_the_flag() {
        let rendered = "error: invalid value 'x' for '--duration <SECS>': not a number\n\n  \
                        tip: to pass '-x' as a value, use '-- -x'\n\nUsage: sonde stream \
                        <HOST>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            usage_line(rendered),
            "error: invalid value 'x' for '--duration <SECS>': not a number"
        );
        let two = "error: the argument '--json' cannot be used with\n  '--json-stream'\n";
        assert_eq!(
            usage_line(two),
            "error: the argument '--json' cannot be used with '--json-stream'"
        );
    }
}
