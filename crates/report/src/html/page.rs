//! What every part of a report shares: its runs, each named by its configuration, and the
//! escape every stored string goes through. A leaf: the report's pages, tables and charts
//! import it, it imports none of them.

use sonde_results::Document;

use crate::look::config_name;

/// A run as the report sees it.
pub struct ReportRun<'a> {
    pub id: i64,
    pub label: Option<String>,
    pub doc: &'a Document,
    /// What rows and legends call it: its configuration (`stream -P 8`), its label, and
    /// its store id only where two runs would otherwise share a name.
    pub name: String,
}

impl<'a> ReportRun<'a> {
    /// Stored runs (id, label, document), each named; repeats of one configuration and
    /// label are told apart by their id (`stream -P 8 #3`).
    pub fn named(stored: Vec<(i64, Option<String>, &'a Document)>) -> Vec<ReportRun<'a>> {
        let base = |label: &Option<String>, doc: &Document| {
            let config = config_name(&doc.start.spec);
            match label {
                Some(l) => format!("{config} ({l})"),
                None => config,
            }
        };
        let names: Vec<String> = stored.iter().map(|(_, l, d)| base(l, d)).collect();
        stored
            .into_iter()
            .zip(&names)
            .map(|((id, label, doc), name)| {
                let repeated = names.iter().filter(|n| *n == name).count() > 1;
                ReportRun {
                    id,
                    label,
                    doc,
                    name: if repeated {
                        format!("{name} #{id}")
                    } else {
                        name.clone()
                    },
                }
            })
            .collect()
    }
}

/// Every stored string in the HTML goes through here (`safe::html`).
pub(crate) fn esc(s: &str) -> String {
    crate::safe::html(s)
}

/// The receiver's CPU cell when both ends shared the sender's host.
pub(crate) const SAME_HOST: &str = "same host";

/// A report section: its anchor, its heading, its body.
pub(super) fn section(id: &str, title: &str, body: &str) -> String {
    format!("<section id=\"{id}\"><h2>{title}</h2>{body}</section>")
}
