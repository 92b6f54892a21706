//! Keeping what orchestration runs: each document into the store (labelled, with its
//! suite key), a fleet's `--ndjson` line and its metrics; and one test's document kept by
//! a plain test command.

use std::path::Path;

use sonde_report::safe::terminal;
use sonde_results::document::FleetPair;
use sonde_results::Document;

use crate::item::{Outcome, Request};
use crate::measure::{Live, Output};
use crate::report_look::Report;
use crate::signals::Interrupt;

/// Stores each document (labelled, with its suite key) and, for a fleet's `--ndjson`,
/// prints it as one line; a fleet's documents carry their pair from assembly. A run cut by
/// Ctrl-C is not kept: an interrupted suite keeps what it finished, and `--resume` runs
/// the rest.
pub struct Keeper<'a> {
    pub db: &'a Path,
    pub label: &'a str,
    pub key: &'a str,
    pub ndjson: bool,
    pub interrupt: &'a Interrupt,
    pub record: Option<Record<'a>>,
}

/// What hears of each fleet run as it ends, its document or why it failed (the metrics
/// of `--every --metrics`).
pub type Record<'a> = &'a (dyn Fn(&FleetPair, Result<&Document, &str>) + Sync);

impl Output for Keeper<'_> {
    fn say(&self, _: &str) {}

    fn interval(&self, _: Live<'_>, _: &dyn Fn() -> String) {}

    fn keep(&self, doc: &Document) {
        if doc.end.partial && self.interrupt.is_set() {
            return;
        }
        let saved = sonde_store::Store::open(self.db)
            .and_then(|s| s.save_for_suite(doc, Some(self.label), Some(self.key)));
        if let Err(e) = saved {
            eprintln!("{}", terminal(&format!("warning: run not saved: {e}")));
        }
        if self.ndjson {
            let line = serde_json::to_string(doc).expect("a document serialises");
            println!("{}", sonde_report::safe::json(&line));
        }
        // The metrics carry the labels the document keeps: the file's and the agents' own.
        if let (Some(record), Some(pair)) = (self.record, doc.start.fleet.as_ref()) {
            record(pair, Ok(doc));
        }
    }
}

/// Runs one item's request in this process, its failure caught and recorded.
pub fn run_item(
    req: Request,
    keeper: &Keeper<'_>,
    words: &[String],
    interrupt: &Interrupt,
) -> Outcome {
    req.run(
        &format!("sonde {}", words.join(" ")),
        &Report,
        keeper,
        interrupt,
    )
}

/// Keeps a run in the store at `db` (the default store without it), under `label`. A store
/// that cannot be written is reported but does not fail the test: the document is still
/// printed and written with --output.
pub fn save_run(db: Option<&Path>, label: Option<&str>, doc: &Document) {
    let path = sonde_store::default_path(db);
    match sonde_store::Store::open(&path).and_then(|s| s.save_for_suite(doc, label, None)) {
        Ok(id) => eprintln!(
            "{}",
            terminal(&format!("saved as run {id} in {}", path.display()))
        ),
        Err(e) => eprintln!("{}", terminal(&format!("warning: run not saved: {e}"))),
    }
}
