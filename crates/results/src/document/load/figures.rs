//! What a test of each kind run as a load contributes to a load's figures: the rows'
//! `load` entries (`document::row`), so the load assembly reads any kind through its row.

use super::LoadFigures;
use crate::document::{PpsEnd, RrEnd, StreamEnd};
use crate::side::Role;

/// Sorts receiver figures by who measured them: the agent receives the upload.
pub(super) fn classify(
    f: &mut LoadFigures,
    measured_by: Role,
    bits_per_second: f64,
    packets_per_second: Option<f64>,
) {
    match measured_by {
        Role::Server => {
            f.upload_bits_per_second = Some(bits_per_second);
            f.upload_packets_per_second = packets_per_second;
        }
        Role::Client => f.download_bits_per_second = Some(bits_per_second),
    }
}

/// A stream load: its receivers' throughput, each way.
pub(crate) fn stream(s: &StreamEnd) -> LoadFigures {
    let mut f = LoadFigures::default();
    let reverse = s.reverse.as_ref().and_then(|r| r.receiver.as_ref());
    for r in reverse.into_iter().chain(&s.receiver) {
        classify(&mut f, r.by.measured_by, r.bits_per_second, None);
    }
    f
}

/// A pps load: its receiver's throughput and packet rate.
pub(crate) fn pps(p: &PpsEnd) -> LoadFigures {
    let mut f = LoadFigures::default();
    if let Some(r) = &p.receiver {
        let pps = Some(r.packets_per_second);
        classify(&mut f, r.by.measured_by, r.bits_per_second, pps);
    }
    f
}

/// An rpc load: the requests the controller completed per second.
pub(crate) fn rr(r: &RrEnd) -> LoadFigures {
    LoadFigures {
        requests_per_second: r.requests_per_second,
        ..LoadFigures::default()
    }
}
