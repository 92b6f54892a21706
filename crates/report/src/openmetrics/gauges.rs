//! The gauge figures of a stored run: its kind's (the row's `gauges`: throughput, RTT,
//! loss), then the verdict every kind may have.

use sonde_results::Document;

use super::figures::{Gauges, Metric, Sample};

/// The gauge figures of a stored run (throughput, RTT, loss, verdict); none is NaN or
/// infinite.
pub(crate) fn samples(doc: &Document) -> Vec<Sample> {
    let mut g = Gauges::default();
    (crate::summary::row(doc.test).gauges)(doc, &mut g);
    if let Some(l) = &doc.end.limited_by {
        g.push(Metric::LimitedBy, ("verdict", l.verdict.as_str()), 1.0);
    }
    g.0
}
