//! What every part of a report shares: its runs and their names, and the escape every
//! stored string goes through. A leaf: the report's pages, tables and charts import it, it
//! imports none of them.

use sonde_results::Document;

/// A run as the report sees it.
pub struct ReportRun<'a> {
    pub id: i64,
    pub label: Option<String>,
    pub doc: &'a Document,
}

/// Every stored string in the HTML goes through here (`safe::html`).
pub(crate) fn esc(s: &str) -> String {
    crate::safe::html(s)
}

/// `run 7 (label)`.
pub(crate) fn run_name(r: &ReportRun<'_>) -> String {
    format!(
        "run {}{}",
        r.id,
        r.label
            .as_ref()
            .map(|l| format!(" ({l})"))
            .unwrap_or_default()
    )
}

/// The receiver's CPU cell when both ends shared the sender's host.
pub(crate) const SAME_HOST: &str = "same host";
