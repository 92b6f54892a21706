//! What limited a run (`end.limited_by`): one named limit, the few figures that decided it
//! with their sides and units, and a runner-up when a second limit came close. The rules
//! are pure functions of the document's figures (no I/O), one module per kind, so that a
//! stored document can be judged again and every rule is tested on plain numbers.

mod cpu;
mod finding;
mod held;
mod pps;
pub mod rpm;
mod rr;
pub mod stages;
mod stream;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_packets;
#[cfg(test)]
mod tests_rpm;
mod window;

use crate::document::Document;
pub use crate::verdict::{Evidence, Finding, Limit, LimitedBy, TransferEnd};
pub use finding::{LOSS_DECISIVE, LOSS_NOISE, RATE_FLOOR, RATE_MET, RUNNER_UP_WITHIN};

/// The verdict on a document's run: `None` for a kind without one (load, watch), a run
/// with too little evidence, or one cut short before any window was measured. An rpm
/// run's is one of its directions' ([`rpm::judge_run`]).
pub fn judge(doc: &Document) -> Option<LimitedBy> {
    if let Some(s) = doc.end.stream() {
        return stream::judge(doc, s);
    }
    if let Some(r) = doc.end.rr() {
        return rr::judge(doc, r);
    }
    if let Some(p) = doc.end.pps() {
        return pps::judge(doc, p);
    }
    if let Some(r) = doc.end.rpm() {
        return rpm::judge_run(r);
    }
    None
}
