//! The test commands from flags to exit code: tune around the test, run its plan through
//! the run layer's one pipeline (`sonde_run::measure`) with this terminal and store as its
//! output and the report crate as its look, then print and write the documents.

use std::io::Write;
use std::process::ExitCode;

use sonde_probe::tune::Goal;
use sonde_results::{Document, SpecError};
use sonde_run::measure::{Live, Measured, Measurement, Output, Plan};
use sonde_run::report_look::Report;
use sonde_run::signals::Interrupt;
use sonde_run::tune::Tuned;

use crate::cli::{self, OutputArgs, StampArgs, Target, WatchArgs};
use crate::errors::{EXIT_ERROR, EXIT_PARTIAL, EXIT_USAGE};

/// This terminal and the store, as `--json`, `--json-stream` and `--no-save` say.
pub struct Terminal<'a>(pub &'a OutputArgs);

impl Output for Terminal<'_> {
    fn say(&self, text: &str) {
        if !self.0.quiet() {
            out!("{text}");
        }
    }

    fn interval(&self, live: Live<'_>, line: &dyn Fn() -> String) {
        if self.0.json_stream {
            let event = match live {
                Live::Test(l) => sonde_report::events::interval(l.client, l.server),
                Live::Watch(i) => sonde_report::events::watch_interval(i),
            };
            jsonln!("{event}");
        } else if !self.0.quiet() {
            outln!("{}", line());
        }
    }

    fn keep(&self, doc: &Document) {
        save_run(&self.0.store, doc);
        if self.0.json_stream {
            jsonln!("{}", sonde_report::events::end(doc));
        }
    }
}

/// A test command (stream, ping, rpc, pps, load) from its plan to its exit code.
pub fn test_command(
    plan: Result<Plan, SpecError>,
    target: &Target,
    out: &OutputArgs,
    command: String,
    interrupt: &Interrupt,
) -> anyhow::Result<ExitCode> {
    let plan = match plan {
        Ok(p) => p,
        Err(e) => {
            errln!("error: {e}");
            return Ok(ExitCode::from(EXIT_USAGE));
        }
    };
    let _tuned = tuned(out.tune, out.json)?;
    let m = measure(plan, &target.target()?, out, &command, interrupt)?;
    // One document per test; several receive modes make an array of them.
    let text = match &m.docs[..] {
        [one] => sonde_report::json(one),
        docs => format!("{}\n", serde_json::to_string_pretty(docs)?),
    };
    let human = (!out.json && m.docs.len() > 1).then(|| sonde_report::look::comparison(&m.docs));
    emit(&text, human, out, m.partial())
}

/// Runs `plan` through the pipeline with this terminal as its output.
fn measure(
    plan: Plan,
    target: &sonde_run::measure::Target,
    out: &OutputArgs,
    command: &str,
    interrupt: &Interrupt,
) -> anyhow::Result<Measured> {
    let m = Measurement {
        target,
        command,
        look: &Report,
        out: &Terminal(out),
        interrupt,
    };
    Ok(m.run(plan)?)
}

/// Runs the command with the host watched; exits with the command's code (a partial
/// watch, cut by Ctrl-C, with EXIT_PARTIAL when the command gave none).
pub fn watch(a: &WatchArgs, command: String, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let plan = match a.plan() {
        Ok(p) => p,
        Err(e) => {
            errln!("error: {e}");
            return Ok(ExitCode::from(EXIT_USAGE));
        }
    };
    let out = &a.output;
    let target = sonde_run::measure::Target {
        host: String::new(),
        from: None,
        port: 0,
        key: None,
        fleet: None,
    };
    let m = measure(plan, &target, out, &command, interrupt)?;
    let (doc, status) = (&m.docs[0], m.status.expect("a watch has a status"));
    emit(&sonde_report::json(doc), None, out, false)?;
    let code = sonde_run::watch::exit_code(status, doc.end.partial, EXIT_PARTIAL);
    Ok(ExitCode::from(code))
}

/// `sonde stamp`: its run, printed and stored like any test's.
pub fn stamp(a: &StampArgs, command: String, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let plan = match a.plan()? {
        Ok(p) => p,
        Err(e) => {
            errln!("error: {e}");
            return Ok(ExitCode::from(EXIT_USAGE));
        }
    };
    let out = &a.output;
    let target = a.target(None)?;
    let m = measure(plan, &target, out, &command, interrupt)?;
    let code = emit(&sonde_report::json(&m.docs[0]), None, out, m.partial())?;
    // Nothing answered: a failure, as a missing agent is to `sonde ping` (the run is
    // still printed and stored, saying why).
    let unanswered = m.docs[0].end.stamp().and_then(|s| s.no_answer);
    Ok(match unanswered {
        Some(_) => ExitCode::from(EXIT_ERROR),
        None => code,
    })
}

/// Keeps a run in the store (unless --no-save), as [`sonde_run::keep::save_run`] says.
pub fn save_run(args: &cli::StoreArgs, doc: &Document) {
    if !args.no_save {
        sonde_run::keep::save_run(args.db.as_deref(), args.label.as_deref(), doc);
    }
}

/// Applies `--tune` for the length of a test; the guard restores on every exit path.
pub fn tuned(goal: Option<Goal>, quiet: bool) -> anyhow::Result<Option<Tuned>> {
    let Some(goal) = goal else { return Ok(None) };
    let (guard, changes) = Tuned::apply(goal)?;
    if !quiet {
        for c in &changes {
            outln!("--tune: changed {}", c.describe());
        }
    }
    Ok(Some(guard))
}

/// Writes the JSON to `--output`, prints JSON or the human text; the exit code says
/// whether the result is partial.
fn emit(
    json_text: &str,
    human: Option<String>,
    out: &OutputArgs,
    partial: bool,
) -> anyhow::Result<ExitCode> {
    if let Some(path) = &out.output {
        write_atomically(path, json_text.as_bytes())?;
    }
    if out.json {
        print!("{}", sonde_report::safe::json(json_text));
    } else if let Some(h) = human {
        out!("{h}");
    }
    std::io::stdout().flush()?;
    Ok(if partial {
        ExitCode::from(EXIT_PARTIAL)
    } else {
        ExitCode::SUCCESS
    })
}

pub use sonde_run::stored::write_atomically;
