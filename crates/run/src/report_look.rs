//! The report crate's renderers as the pipeline's [`Look`]: what `sonde_run::measure`
//! prints for a test, per kind (`sonde_report::look` chooses).

use sonde_results::document::load::PhaseRun;
use sonde_results::document::{IntervalFigures, Trial};
use sonde_results::{Document, IntervalSample, TestSpec};

use crate::measure::Look;

/// The report crate's renderers, per kind (`sonde_report::look` chooses).
pub struct Report;

impl Look for Report {
    fn heading(&self, spec: &TestSpec, path: &str, search: bool) -> String {
        sonde_report::look::heading(spec, path, search)
    }

    fn live(
        &self,
        spec: &TestSpec,
        c: Option<&IntervalSample>,
        s: Option<&IntervalSample>,
    ) -> String {
        sonde_report::look::live_line(spec, c, s)
    }

    fn watch_line(&self, figures: &IntervalFigures) -> String {
        sonde_report::live::watch_line(figures)
    }

    fn trial(&self, n: usize, trial: &Trial) -> String {
        sonde_report::summary::trial_line(n, trial)
    }

    fn phase(&self, run: &PhaseRun) -> String {
        sonde_report::live::load_phase_line(run)
    }

    fn summary(&self, doc: &Document) -> String {
        let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
        once_per_run(&sonde_report::look::summary(doc), &mut said)
    }
}

/// The default-engine notes this process has printed: several tests of one run (`sonde
/// lab`) say each once, not once per test and side. The documents keep theirs.
static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// `summary` without the default-engine notes already in `said` (which it extends).
fn once_per_run(summary: &str, said: &mut Vec<String>) -> String {
    let tail = crate::kind::table::CHOSEN_BY_DEFAULT;
    let mut out = String::with_capacity(summary.len());
    for line in summary.split_inclusive('\n') {
        if line.contains(tail) {
            if said.iter().any(|s| s == line) {
                continue;
            }
            said.push(line.to_string());
        }
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::table::CHOSEN_BY_DEFAULT;

    #[test]
    fn a_default_engine_note_is_printed_once_per_run() {
        let uring = format!("note: client: engine uring: {CHOSEN_BY_DEFAULT}\n");
        let kernel = format!("note: client: engine kernel: {CHOSEN_BY_DEFAULT}\n");
        let test = |note: &str| format!("table\n{note}note: client: lo takes no interrupts\n");
        let mut said = Vec::new();
        assert_eq!(once_per_run(&test(&uring), &mut said), test(&uring));
        // The next test with the same default: its other notes stay.
        let rest = "table\nnote: client: lo takes no interrupts\n";
        assert_eq!(once_per_run(&test(&uring), &mut said), rest);
        // Another engine's default is news once.
        assert_eq!(once_per_run(&test(&kernel), &mut said), test(&kernel));
        assert_eq!(once_per_run(&test(&kernel), &mut said), rest);
    }
}
