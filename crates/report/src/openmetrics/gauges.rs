//! The gauge figures of a stored run: its kind's (the row's `gauges`: throughput, RTT,
//! loss), then the verdict every kind may have.

use sonde_results::Document;

use super::figures::{Gauges, Metric, Sample};

/// The gauge figures of a stored run (throughput, RTT, loss, verdict); none is NaN or
/// infinite. A kind whose row wrote verdicts of its own (rpm, one per direction, the run's
/// among them) does not get the run's again.
pub(crate) fn samples(doc: &Document) -> Vec<Sample> {
    let mut g = Gauges::default();
    (crate::summary::row(doc.test).gauges)(doc, &mut g);
    let own = g.0.iter().any(|s| s.metric == Metric::LimitedBy);
    match &doc.end.limited_by {
        Some(l) if !own => g.push(Metric::LimitedBy, ("verdict", l.verdict.as_str()), 1.0),
        _ => {}
    }
    g.0
}
