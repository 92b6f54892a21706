//! Where a round trip's time went (`--stages`): seven stages from the kernel's own
//! timestamps on both ends, each a difference of two readings on one host's clock, that
//! sum to each message's round trip.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::latency::{merge, LatencySummary};
use crate::side::Role;

/// A stage of a round trip, in the order a message meets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Client: the application's send call until the packet entered the qdisc.
    ClientSend,
    /// Client: the qdisc until the driver took the packet.
    ClientQdisc,
    /// Outside both hosts' stacks: wire, NICs, switches, hypervisor (the round trip less
    /// every other stage).
    Outside,
    /// Echo: the request's arrival in the stack until the application read it.
    ServerWake,
    /// Echo: the application read the request until it sent the answer.
    ServerTurnaround,
    /// Echo: the answer's send call until its driver took it.
    ServerSend,
    /// Client: the answer's arrival in the stack until the application read it.
    ClientWake,
}

impl Stage {
    /// Every stage, in the engine's order (`sonde_engine::kstamps::stages`).
    pub const ALL: [Stage; 7] = [
        Stage::ClientSend,
        Stage::ClientQdisc,
        Stage::Outside,
        Stage::ServerWake,
        Stage::ServerTurnaround,
        Stage::ServerSend,
        Stage::ClientWake,
    ];

    /// Its name in a table.
    pub fn label(self) -> &'static str {
        match self {
            Stage::ClientSend => "client send stack",
            Stage::ClientQdisc => "client qdisc+driver",
            Stage::Outside => "outside the hosts",
            Stage::ServerWake => "server receive wake-up",
            Stage::ServerTurnaround => "server turnaround",
            Stage::ServerSend => "server send stack",
            Stage::ClientWake => "client receive wake-up",
        }
    }

    /// The host whose clock measured it; `None`: both (the remainder).
    pub fn measured_on(self) -> Option<Role> {
        match self {
            Stage::ClientSend | Stage::ClientQdisc | Stage::ClientWake => Some(Role::Client),
            Stage::ServerWake | Stage::ServerTurnaround | Stage::ServerSend => Some(Role::Server),
            Stage::Outside => None,
        }
    }
}

/// The stages of the messages of an interval or a whole test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stages {
    /// Messages split into stages.
    pub split: u64,
    /// Messages without a stage split: a timestamp the kernel did not give, an answer
    /// without the echo's figures; counted, never guessed.
    pub missing: u64,
    /// Messages whose readings were out of order (a stage would be negative).
    pub disordered: u64,
    /// Each stage's distribution, nanoseconds.
    pub ns: BTreeMap<Stage, LatencySummary>,
    /// One message in this many was stamped at both ends (the run's `--stages`; 1: every
    /// one; absent in a previous build's document: every one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled_every: Option<u32>,
}

impl Stages {
    /// How the messages were chosen, for a line under the figures.
    pub fn sampling(&self) -> String {
        match self.sampled_every.unwrap_or(1) {
            1 => "every message stamped at both ends".into(),
            n => format!("one message in {n} stamped at both ends"),
        }
    }
}

/// Stage histograms being summed (an interval's, or the whole test's).
#[derive(Debug, Clone)]
pub struct StageTally {
    pub hists: [Histogram<u64>; 7],
    pub missing: u64,
    pub disordered: u64,
}

impl Default for StageTally {
    fn default() -> Self {
        StageTally {
            hists: std::array::from_fn(|_| crate::latency::new_histogram()),
            missing: 0,
            disordered: 0,
        }
    }
}

impl StageTally {
    /// Adds histograms in [`Stage::ALL`]'s order and the uncounted messages.
    pub fn add(&mut self, hists: &[Histogram<u64>; 7], missing: u64, disordered: u64) {
        for (into, from) in self.hists.iter_mut().zip(hists) {
            merge(into, from);
        }
        self.missing += missing;
        self.disordered += disordered;
    }

    /// The figures; `None` when no message was seen at all.
    pub fn summary(&self) -> Option<Stages> {
        let split = self.hists[0].len();
        if split + self.missing + self.disordered == 0 {
            return None;
        }
        let ns = Stage::ALL
            .iter()
            .zip(&self.hists)
            .filter_map(|(&s, h)| Some((s, LatencySummary::of(h)?)))
            .collect();
        Some(Stages {
            split,
            missing: self.missing,
            disordered: self.disordered,
            ns,
            sampled_every: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_keeps_every_stage_and_its_keys_are_the_stage_names() {
        let mut one: [Histogram<u64>; 7] = std::array::from_fn(|_| crate::latency::new_histogram());
        for (i, h) in one.iter_mut().enumerate() {
            h.record(1_000 * (i as u64 + 1)).unwrap();
        }
        let mut t = StageTally::default();
        assert!(t.summary().is_none());
        t.add(&one, 2, 1);
        t.add(&one, 0, 0);
        let s = t.summary().unwrap();
        assert_eq!((s.split, s.missing, s.disordered), (2, 2, 1));
        assert_eq!(s.ns[&Stage::ClientWake].count, 2);
        let json = serde_json::to_value(&s).unwrap();
        let mut keys: Vec<&str> = json["ns"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "client_qdisc",
                "client_send",
                "client_wake",
                "outside",
                "server_send",
                "server_turnaround",
                "server_wake"
            ]
        );
        let back: Stages = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
    }
}
