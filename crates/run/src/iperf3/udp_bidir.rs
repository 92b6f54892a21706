//! iperf3's UDP `--bidir` on our side: senders on the streams of our direction and
//! receivers on the far end's, at once, as one [`Side`]. Each is the packet-rate kind's
//! own side ([`PpsSide`]) on its share of the streams; their intervals close together and
//! travel as one sample (the other direction's in its `reverse`), their results as one
//! side result (the other direction's part in its `reverse`), so the document holds both
//! directions with each one's sender, receiver and loss.

use std::time::{Duration, Instant};

use sonde_results::{IntervalSample, SampleSection, SideResult, SideSection};

use crate::kind::pps::PpsSide;
use crate::side::Side;

/// Both directions of a bidirectional UDP test on our side: `primary` is our part of the
/// document's forward direction (senders when we are the client, receivers when we serve),
/// `other` our part of the reverse one.
pub struct Bidir {
    primary: PpsSide,
    other: PpsSide,
    /// Each one's interval closed, waiting for the other's.
    pending: (Option<IntervalSample>, Option<IntervalSample>),
    /// When our senders were told to stop.
    stopped: Option<Instant>,
    /// How long after that the receivers keep reading what is still on the way: the far
    /// end stops sending only when the test's end reaches it.
    linger: Duration,
}

impl Bidir {
    pub fn new(primary: PpsSide, other: PpsSide, linger: Duration) -> Bidir {
        Bidir {
            primary,
            other,
            pending: (None, None),
            stopped: None,
            linger,
        }
    }

    /// Both intervals, as one sample: the primary's, carrying the other's as its reverse.
    fn merged(&mut self) -> Option<IntervalSample> {
        let other_over = self.other.next_deadline().is_none();
        let ready = self.pending.0.is_some() && (self.pending.1.is_some() || other_over);
        if !ready {
            return None;
        }
        let mut s = self.pending.0.take()?;
        let r = self.pending.1.take();
        if let (SampleSection::Pps(p), Some(r)) = (&mut s.section, r) {
            if let SampleSection::Pps(rp) = r.section {
                p.reverse = Some(Box::new(rp));
            }
            s.partial |= r.partial;
        }
        Some(s)
    }
}

impl Side for Bidir {
    /// The later of the two: their schedules start microseconds apart, so both edges are
    /// due then and close in the same call.
    fn next_deadline(&self) -> Option<Instant> {
        match (self.primary.next_deadline(), self.other.next_deadline()) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
    fn on_time(&mut self, now: Instant) -> Option<IntervalSample> {
        if let Some(s) = self.primary.on_time(now) {
            self.pending.0 = Some(s);
        }
        if let Some(s) = self.other.on_time(now) {
            self.pending.1 = Some(s);
        }
        self.merged()
    }
    fn cut_interval(&mut self) -> Option<IntervalSample> {
        if let Some(s) = self.primary.cut_interval() {
            self.pending.0 = Some(s);
        }
        if let Some(s) = self.other.cut_interval() {
            self.pending.1 = Some(s);
        }
        self.merged()
    }
    fn is_draining(&self) -> bool {
        self.primary.is_draining() && self.other.is_draining()
    }
    fn all_done(&self) -> bool {
        let lingered = self.stopped.is_some_and(|t| t.elapsed() >= self.linger);
        lingered && self.primary.all_done() && self.other.all_done()
    }
    fn planned_end(&self) -> Instant {
        self.primary.planned_end().max(self.other.planned_end())
    }
    fn finish_senders(&mut self) {
        self.primary.finish_senders();
        self.other.finish_senders();
        self.stopped.get_or_insert_with(Instant::now);
    }
    fn into_result(self: Box<Self>, partial: bool) -> SideResult {
        let Bidir { primary, other, .. } = *self;
        let mut ours = Box::new(primary).into_result(partial);
        let theirs = Box::new(other).into_result(partial);
        ours.partial |= theirs.partial;
        ours.notes.extend(
            theirs
                .notes
                .into_iter()
                .map(|n| format!("the other direction: {n}")),
        );
        if let (SideSection::Pps(p), SideSection::Pps(r)) = (&mut ours.section, theirs.section) {
            p.reverse = Some(Box::new(r));
        }
        ours
    }
}
