//! The load spec: latency of a UDP and a TCP ping while a load runs each way, phase by
//! phase (flent's RRUL, crusader). The controller runs it as concurrent tests of the
//! other kinds; no agent runs a `load` spec itself.

use serde::{Deserialize, Serialize};

use super::{refuse, Direction, RrSpec, SpecError, TestSpec, Transport, MAX_WINDOW};

/// Highest ping rate: pings probe the load's latency, they must not be a load themselves.
pub const MAX_PING_RATE: f64 = 10_000.0;

/// What runs beside the pings in one phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Pings only: the baseline.
    Idle,
    /// The controller sends.
    Upload,
    /// The agent sends.
    Download,
    /// Both send at once.
    Both,
}

impl Phase {
    pub const ALL: [Phase; 4] = [Phase::Idle, Phase::Upload, Phase::Download, Phase::Both];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Upload => "upload",
            Phase::Download => "download",
            Phase::Both => "both",
        }
    }

    pub fn parse(s: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadSpec {
    /// In the order they run; each lasts the load's timing.
    pub phases: Vec<Phase>,
    /// Pings per second of each of the two pings, timed from the intended send.
    pub ping_rate_per_s: f64,
    /// Request and response size of the pings.
    pub ping_bytes: u32,
    /// Split each ping's round trips into stages (`--stages`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ping_stages: bool,
    /// With stages: one ping in this many split (absent: `default_stage_every` of the
    /// ping's rate and the phase's length).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ping_stage_every: Option<u32>,
    /// The load (stream, pps or rpc) with the timing every phase runs; a stream's direction
    /// is set per phase.
    pub load: Box<TestSpec>,
}

impl Default for LoadSpec {
    fn default() -> Self {
        LoadSpec {
            phases: Phase::ALL.to_vec(),
            ping_rate_per_s: 100.0,
            ping_bytes: 64,
            ping_stages: false,
            ping_stage_every: None,
            load: Box::new(TestSpec::Stream(Default::default())),
        }
    }
}

impl LoadSpec {
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.phases.is_empty() {
            return refuse("--phases", "no phase to run");
        }
        let r = self.ping_rate_per_s;
        if !(r.is_finite() && r > 0.0 && r <= MAX_PING_RATE) {
            return refuse(
                "--ping-rate",
                format!("{r} is not a rate in (0, {MAX_PING_RATE}] per second"),
            );
        }
        let b = self.ping_bytes;
        let least = super::UDP_REQUEST_HEADER_BYTES;
        if !(least..=super::MAX_UDP_MESSAGE_BYTES).contains(&b) {
            return refuse(
                "--ping-size",
                format!(
                    "{b} bytes is not in {least}..={} (a UDP ping carries an 8-byte sequence \
                     number and the test's 8-byte cookie)",
                    super::MAX_UDP_MESSAGE_BYTES
                ),
            );
        }
        let staged = super::UDP_REQUEST_HEADER_BYTES + super::STAGE_FIGURE_BYTES;
        if self.ping_stages && b < staged {
            return refuse(
                "--stages",
                format!("pings of {b} bytes have no room for the echo's figures: use --ping-size {staged} or more"),
            );
        }
        match self.load.as_ref() {
            TestSpec::Stream(_) => {}
            TestSpec::Pps(_) | TestSpec::Rpc(_) => {
                if let Some(p) = self.phases.iter().find(|p| !self.can_run(**p)) {
                    return refuse(
                        "--phases",
                        format!(
                            "--load {} has no '{}' phase (it runs idle and {})",
                            self.load.name(),
                            p.as_str(),
                            self.loaded_phase().as_str()
                        ),
                    );
                }
            }
            other => {
                return refuse(
                    "--load",
                    format!("'{}' is not a load (stream, pps, rpc)", other.name()),
                )
            }
        }
        self.load.validate()?;
        for t in [Transport::Udp, Transport::Tcp] {
            TestSpec::Ping(self.ping(t)).validate()?;
        }
        Ok(())
    }

    /// The one loaded phase of a load that is not a stream: a pps sender sends from the
    /// controller; an rpc's requests and responses go both ways.
    fn loaded_phase(&self) -> Phase {
        match self.load.as_ref() {
            TestSpec::Pps(_) => Phase::Upload,
            _ => Phase::Both,
        }
    }

    fn can_run(&self, phase: Phase) -> bool {
        match self.load.as_ref() {
            TestSpec::Stream(_) => true,
            _ => phase == Phase::Idle || phase == self.loaded_phase(),
        }
    }

    /// The ping over `transport` that runs through a phase: open loop at the ping rate,
    /// with room for a second of round trips in flight, blocking receive (a spinning ping
    /// would take a core from the load), not pinned; holding the load's CPU latency limit,
    /// so that it holds in the idle phase too.
    pub fn ping(&self, transport: Transport) -> RrSpec {
        let timing = self.load.timing();
        RrSpec {
            transport,
            request_bytes: self.ping_bytes,
            response_bytes: self.ping_bytes,
            window: (self.ping_rate_per_s.ceil() as u32).clamp(8, MAX_WINDOW),
            rate_per_s: Some(self.ping_rate_per_s),
            stages: self.ping_stages,
            stage_every: self.ping_stages.then(|| {
                self.ping_stage_every.unwrap_or_else(|| {
                    super::rr::default_stage_every(
                        Some(self.ping_rate_per_s),
                        timing.duration_ms,
                        1,
                    )
                })
            }),
            open_loop: true,
            execution: super::Execution {
                cpu_latency_us: self.load.execution().cpu_latency_us,
                marks: self.load.execution().marks,
                ..Default::default()
            },
            timing: super::Timing {
                cooldown_ms: 0,
                ..timing.clone()
            },
            ..RrSpec::default()
        }
    }

    /// The load of `phase`; `None` for idle.
    pub fn load_of(&self, phase: Phase) -> Option<TestSpec> {
        let direction = match phase {
            Phase::Idle => return None,
            Phase::Upload => Direction::Forward,
            Phase::Download => Direction::Reverse,
            Phase::Both => Direction::Bidir,
        };
        let mut load = self.load.as_ref().clone();
        if let TestSpec::Stream(s) = &mut load {
            s.direction = direction;
        }
        Some(load)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{assert_refused, PpsSpec};
    use super::*;

    #[test]
    fn load_refusals_name_the_flag() {
        let d = LoadSpec::default();
        d.validate().unwrap();
        let pps = |phases: Vec<Phase>| LoadSpec {
            load: Box::new(TestSpec::Pps(PpsSpec::default())),
            phases,
            ..LoadSpec::default()
        };
        pps(vec![Phase::Idle, Phase::Upload]).validate().unwrap();
        let cases = vec![
            (
                LoadSpec {
                    phases: vec![],
                    ..d.clone()
                },
                "--phases",
            ),
            (
                LoadSpec {
                    ping_rate_per_s: 0.0,
                    ..d.clone()
                },
                "--ping-rate",
            ),
            (
                LoadSpec {
                    ping_bytes: 4,
                    ..d.clone()
                },
                "--ping-size",
            ),
            (
                LoadSpec {
                    ping_bytes: 15,
                    ..d.clone()
                },
                "--ping-size",
            ),
            (pps(vec![Phase::Idle, Phase::Download]), "--phases"),
            (
                LoadSpec {
                    load: Box::new(TestSpec::Load(d.clone())),
                    ..d.clone()
                },
                "--load",
            ),
        ];
        assert_refused(cases, LoadSpec::validate);
    }

    #[test]
    fn each_phase_sets_the_stream_direction_and_pings_run_open_loop() {
        let d = LoadSpec::default();
        assert!(d.load_of(Phase::Idle).is_none());
        let TestSpec::Stream(s) = d.load_of(Phase::Download).unwrap() else {
            panic!()
        };
        assert_eq!(s.direction, Direction::Reverse);
        let p = d.ping(Transport::Udp);
        assert!(p.open_loop);
        assert_eq!(p.rate_per_s, Some(100.0));
        assert_eq!(p.timing.duration_ms, d.load.timing().duration_ms);
        assert_eq!(p.timing.cooldown_ms, 0);
    }
}
