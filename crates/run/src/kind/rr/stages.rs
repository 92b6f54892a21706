//! The client side's stage histograms and one-way delays (`--stages`): the engine's
//! per-interval filings summed for the whole window and kept per interval until it is
//! reported.

use std::collections::BTreeMap;

use sonde_engine::kstamps::StageHists;
use sonde_results::oneway::{Exchange, OneWayRaw, OneWayTally};
use sonde_results::stages::{StageTally, Stages};

#[derive(Default)]
pub struct StageTallies {
    pub total: StageTally,
    pub oneway: OneWayTally,
    pending: BTreeMap<u32, (StageTally, OneWayTally)>,
}

impl StageTallies {
    /// Adds a worker's filing of interval `idx`.
    pub fn add(&mut self, idx: u32, s: &StageHists) {
        let mut ways = OneWayTally {
            unkept: s.exchanges_dropped,
            ..OneWayTally::default()
        };
        for &[at_ns, forward_raw_ns, reverse_raw_ns] in &s.exchanges {
            ways.record(Exchange {
                at_ns,
                forward_raw_ns,
                reverse_raw_ns,
            });
        }
        self.total.add(&s.stages, s.missing, s.disordered);
        self.oneway.add(&ways);
        let (t, w) = self.pending.entry(idx).or_default();
        t.add(&s.stages, s.missing, s.disordered);
        w.add(&ways);
    }

    /// Interval `k`'s stages and raw one-way delays, taken once.
    pub fn interval(&mut self, k: u32) -> (Option<Stages>, Option<OneWayRaw>) {
        match self.pending.remove(&k) {
            Some((t, w)) => (t.summary(), w.raw()),
            None => (None, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::stages::Stage;

    /// The engine's stage order is the model's: a value filed as the engine's k-th
    /// stage reads back as `Stage::ALL[k]`, and the figure bytes agree.
    #[test]
    fn the_engines_stages_are_the_models_in_order() {
        use sonde_engine::kstamps::stages as e;
        let order = [
            (e::CLIENT_SEND, Stage::ClientSend),
            (e::CLIENT_QDISC, Stage::ClientQdisc),
            (e::OUTSIDE, Stage::Outside),
            (e::SERVER_WAKE, Stage::ServerWake),
            (e::SERVER_TURN, Stage::ServerTurnaround),
            (e::SERVER_SEND, Stage::ServerSend),
            (e::CLIENT_WAKE, Stage::ClientWake),
        ];
        let mut h = StageHists::new();
        let mut split = [0u64; e::STAGES];
        for (k, _) in order {
            split[k] = 1_000 * (k as u64 + 1);
        }
        h.record(Ok(split));
        let mut t = StageTallies::default();
        t.add(3, &h);
        let s = t.interval(3).0.unwrap();
        for (k, stage) in order {
            assert_eq!(Stage::ALL[k], stage);
            let want = 1_000 * (k as u64 + 1);
            assert_eq!(s.ns[&stage].max, h.stages[k].highest_equivalent(want));
        }
        assert!(t.interval(3).0.is_none(), "taken once");
        assert_eq!(
            e::FIGURE_BYTES as u32,
            sonde_results::spec::STAGE_FIGURE_BYTES
        );
    }

    /// Exchanges a worker could not keep reach the interval's and the window's tallies
    /// as a count.
    #[test]
    fn exchanges_not_kept_are_counted_in_the_tallies() {
        let mut h = StageHists::new();
        h.exchanges = vec![[1_000, 20_000, 20_000]];
        h.exchanges_dropped = 7;
        let mut t = StageTallies::default();
        t.add(0, &h);
        let raw = t.interval(0).1.unwrap();
        assert_eq!((raw.exchanges, raw.unkept), (1, 7));
        assert_eq!(t.oneway.unkept, 7);
    }
}
