//! The client side's stage histograms (`--stages`): the engine's per-interval filings
//! summed for the whole window and kept per interval until it is reported.

use std::collections::BTreeMap;

use sonde_engine::stamps::StageHists;
use sonde_results::stages::{StageTally, Stages};

#[derive(Default)]
pub struct StageTallies {
    pub total: StageTally,
    pending: BTreeMap<u32, StageTally>,
}

impl StageTallies {
    /// Adds a worker's filing of interval `idx`.
    pub fn add(&mut self, idx: u32, s: &StageHists) {
        self.total.add(&s.stages, s.missing, s.disordered);
        let t = self.pending.entry(idx).or_default();
        t.add(&s.stages, s.missing, s.disordered);
    }

    /// Interval `k`'s stages, taken once.
    pub fn interval(&mut self, k: u32) -> Option<Stages> {
        self.pending.remove(&k)?.summary()
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
        use sonde_engine::stamps::stages as e;
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
        let s = t.interval(3).unwrap();
        for (k, stage) in order {
            assert_eq!(Stage::ALL[k], stage);
            let want = 1_000 * (k as u64 + 1);
            assert_eq!(s.ns[&stage].max, h.stages[k].highest_equivalent(want));
        }
        assert!(t.interval(3).is_none(), "taken once");
        assert_eq!(
            e::FIGURE_BYTES as u32,
            sonde_results::spec::STAGE_FIGURE_BYTES
        );
    }
}
