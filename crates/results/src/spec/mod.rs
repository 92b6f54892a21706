//! What a test asks for. A `TestSpec` travels from the controller to the agent in `Setup`
//! and is stored in the result document, so every field is plain, serialisable and named
//! with its unit. Validation lives here so that both sides refuse the same bad values.
//!
//! Every kind's spec flattens the two parts all kinds share, [`Timing`] and
//! [`Execution`], so their JSON names stay those of schema version 1.
//!
//! A kind is declared here, in this one file: its spec's module, its [`TestSpec`] variant
//! and its [`TestName`] (the `test` tag of specs and documents, typed).

mod engine;
mod load;
mod pps;
mod rpm;
mod rr;
mod stamp;
mod stream;
pub mod units;
mod watch;

pub use engine::{Engine, UnknownEngine};
pub use load::*;
pub use pps::*;
pub use rpm::*;
pub use rr::*;
pub use stamp::*;
pub use stream::*;
pub use watch::*;

use serde::{Deserialize, Serialize};

/// Largest number of data connections one test may open (each is a socket on both sides).
pub const MAX_CONNECTIONS: u32 = 1024;
/// Longest test the agent accepts: a day. Bounds every loop that sends.
pub const MAX_DURATION_MS: u64 = 24 * 3600 * 1000;
pub const MIN_INTERVAL_MS: u64 = 100;
pub const MAX_THREADS: u32 = 1024;
/// Highest CPU number a list may name.
pub const MAX_CPU: usize = 4095;

/// A test's name, as `TestSpec`'s tag and `Document.test` spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestName {
    Stream,
    Ping,
    Rpc,
    Pps,
    Load,
    Watch,
    Stamp,
    Rpm,
}

impl TestName {
    /// Every test, in the order reports list them.
    pub const ALL: [TestName; 8] = [
        TestName::Stream,
        TestName::Ping,
        TestName::Rpc,
        TestName::Pps,
        TestName::Load,
        TestName::Watch,
        TestName::Stamp,
        TestName::Rpm,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TestName::Stream => "stream",
            TestName::Ping => "ping",
            TestName::Rpc => "rpc",
            TestName::Pps => "pps",
            TestName::Load => "load",
            TestName::Watch => "watch",
            TestName::Stamp => "stamp",
            TestName::Rpm => "rpm",
        }
    }
}

impl std::fmt::Display for TestName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One test, tagged by type so new test types join without breaking old peers' parsing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "test", rename_all = "snake_case")]
pub enum TestSpec {
    Stream(StreamSpec),
    /// One message in flight, round-trip times (sockperf ping-pong).
    Ping(RrSpec),
    /// Many connections × many messages in flight (msg_gen, neper tcp_rr / tcp_crr).
    Rpc(RrSpec),
    /// Small UDP packets, many flows (dpdk-testpmd txonly/rxonly with kernel sockets).
    Pps(PpsSpec),
    /// Pings through phases of load (flent's RRUL): run by the controller as concurrent
    /// tests of the kinds above.
    Load(LoadSpec),
    /// The host evidence around any command (`sonde watch`): no test traffic, no agent.
    Watch(WatchSpec),
    /// STAMP (RFC 8762/8972) to any reflector (`sonde stamp`): no agent at the far end.
    Stamp(StampSpec),
    /// Responsiveness (IETF IPPM draft) against any test endpoint (`sonde rpm`): no agent.
    Rpm(RpmSpec),
}

impl TestSpec {
    pub fn name(&self) -> &'static str {
        self.test_name().as_str()
    }

    /// The test this spec asks for, as its document names it.
    pub fn test_name(&self) -> TestName {
        match self {
            TestSpec::Stream(_) => TestName::Stream,
            TestSpec::Ping(_) => TestName::Ping,
            TestSpec::Rpc(_) => TestName::Rpc,
            TestSpec::Pps(_) => TestName::Pps,
            TestSpec::Load(_) => TestName::Load,
            TestSpec::Watch(_) => TestName::Watch,
            TestSpec::Stamp(_) => TestName::Stamp,
            TestSpec::Rpm(_) => TestName::Rpm,
        }
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        match self {
            TestSpec::Stream(s) => s.validate(),
            TestSpec::Ping(r) | TestSpec::Rpc(r) => r.validate(),
            TestSpec::Pps(p) => p.validate(),
            TestSpec::Load(l) => l.validate(),
            TestSpec::Watch(w) => w.validate(),
            TestSpec::Stamp(s) => s.validate(),
            TestSpec::Rpm(r) => r.validate(),
        }
    }

    /// What an agent must announce to run this spec: the test's name, with its engine
    /// when that is not the kernel's (`pps/xdp`). An engine chosen by default asks only
    /// for the kernel's: an agent without it runs the kernel engine.
    pub fn capability(&self) -> String {
        let ex = self.execution();
        let engine = if ex.engine_auto {
            Engine::Kernel
        } else {
            ex.engine
        };
        capability(self.name(), engine)
    }

    /// The capability of the spec's engine itself (`rpc/uring`, even when chosen by
    /// default).
    pub fn engine_capability(&self) -> String {
        capability(self.name(), self.execution().engine)
    }

    /// A load's is each phase's (its load's).
    pub fn timing(&self) -> &Timing {
        match self {
            TestSpec::Load(l) => l.load.timing(),
            TestSpec::Watch(w) => &w.timing,
            TestSpec::Stamp(s) => &s.timing,
            TestSpec::Rpm(r) => &r.timing,
            TestSpec::Stream(s) => &s.timing,
            TestSpec::Ping(r) | TestSpec::Rpc(r) => &r.timing,
            TestSpec::Pps(p) => &p.timing,
        }
    }

    /// A load's is its load's.
    /// The stamps the stages ask for (`--stamps`): ping and rpc's; software elsewhere.
    pub fn stamps(&self) -> crate::stamps::StampSource {
        match self {
            TestSpec::Ping(r) | TestSpec::Rpc(r) => r.stamps,
            _ => crate::stamps::StampSource::Software,
        }
    }

    pub fn execution(&self) -> &Execution {
        match self {
            TestSpec::Load(l) => l.load.execution(),
            TestSpec::Watch(w) => &w.execution,
            TestSpec::Stamp(s) => &s.execution,
            TestSpec::Rpm(r) => &r.execution,
            TestSpec::Stream(s) => &s.execution,
            TestSpec::Ping(r) | TestSpec::Rpc(r) => &r.execution,
            TestSpec::Pps(p) => &p.execution,
        }
    }

    pub fn execution_mut(&mut self) -> &mut Execution {
        match self {
            TestSpec::Load(l) => l.load.execution_mut(),
            TestSpec::Watch(w) => &mut w.execution,
            TestSpec::Stamp(s) => &mut s.execution,
            TestSpec::Rpm(r) => &mut r.execution,
            TestSpec::Stream(s) => &mut s.execution,
            TestSpec::Ping(r) | TestSpec::Rpc(r) => &mut r.execution,
            TestSpec::Pps(p) => &mut p.execution,
        }
    }
}

/// The capability of test `name` run by `engine` (see [`TestSpec::capability`]).
pub fn capability(name: &str, engine: Engine) -> String {
    if engine == Engine::Kernel {
        name.into()
    } else {
        format!("{name}/{engine}")
    }
}

/// When a test measures: the part of its timeline every kind shares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// The measured window.
    pub duration_ms: u64,
    /// Before the window, excluded from figures.
    pub warmup_ms: u64,
    /// After the window, excluded from figures (none for pps: its sender stops at the end).
    #[serde(default)]
    pub cooldown_ms: u64,
    pub interval_ms: u64,
}

impl Timing {
    /// `duration_ms` of window after a second of warm-up, one-second intervals.
    pub fn measuring(duration_ms: u64) -> Timing {
        Timing {
            duration_ms,
            warmup_ms: 1_000,
            cooldown_ms: 0,
            interval_ms: 1_000,
        }
    }

    /// Time from start until the senders stop: warm-up, measured window, cool-down.
    /// Saturates: a peer's `duration_ms` near 2^64 must read as too long, never wrap short.
    pub fn total_ms(&self) -> u64 {
        self.warmup_ms
            .saturating_add(self.duration_ms)
            .saturating_add(self.cooldown_ms)
    }

    /// Intervals in the measured window.
    pub fn intervals(&self) -> u64 {
        self.duration_ms.div_ceil(self.interval_ms.max(1))
    }

    /// The measured window, the whole test's length, and the report interval.
    pub(crate) fn check(&self) -> Result<(), SpecError> {
        if self.duration_ms == 0 {
            return refuse("--duration", "must be more than 0 s");
        }
        if self.total_ms() > MAX_DURATION_MS {
            return refuse("--duration", "warm-up + duration + cool-down exceeds 24 h");
        }
        if self.interval_ms > MAX_DURATION_MS {
            // Interval arithmetic (count x interval) stays within u64 below this.
            return refuse(
                "--interval",
                format!("{} ms is longer than 24 h", self.interval_ms),
            );
        }
        if self.interval_ms < MIN_INTERVAL_MS {
            return refuse(
                "--interval",
                format!(
                    "{} ms is below the minimum of {MIN_INTERVAL_MS} ms",
                    self.interval_ms
                ),
            );
        }
        Ok(())
    }
}

/// How both sides run the data plane: which engine, on which CPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// The data-plane engine on both sides (`kernel`; others where the kind has them).
    #[serde(default)]
    pub engine: Engine,
    /// No `--engine` was given: `engine` is the test's default, the fastest this build
    /// measured for it, and a side that cannot run it runs the kernel engine (its result
    /// says so).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub engine_auto: bool,
    /// CPUs the controller's workers are pinned to, round robin; `None`: not pinned.
    pub client_cpus: Option<Vec<usize>>,
    /// The controller chooses its CPUs when the test starts (`--cpus auto`); cleared once
    /// it has, so a stored spec holds the CPUs it ran on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub client_cpus_auto: bool,
    /// CPUs the agent's workers are pinned to, round robin; `None`: not pinned.
    pub server_cpus: Option<Vec<usize>>,
    /// The agent chooses its CPUs itself (`--server-cpus auto`), on its own host.
    #[serde(default)]
    pub server_cpus_auto: bool,
    /// Both sides hold the PM QoS CPU latency limit at this many µs for the test
    /// (`/dev/cpu_dma_latency`): no idle state slower to leave is entered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_latency_us: Option<u32>,
    /// The DSCP and ECN both sides set on every data packet, and the control
    /// connection's DSCP (`--dscp`, `--ecn`, `--control-dscp`): every kind's, so set here.
    #[serde(default, skip_serializing_if = "crate::marks::Marks::is_unset")]
    pub marks: crate::marks::Marks,
}

impl Default for Execution {
    fn default() -> Self {
        Execution {
            engine: Engine::Kernel,
            engine_auto: false,
            client_cpus: None,
            client_cpus_auto: false,
            server_cpus: None,
            server_cpus_auto: false,
            cpu_latency_us: None,
            marks: Default::default(),
        }
    }
}

impl Execution {
    fn check(&self) -> Result<(), SpecError> {
        if let Some((flag, reason)) = self.marks.refusal() {
            return refuse(flag, reason);
        }
        if let Some(us) = self.cpu_latency_us {
            if us > i32::MAX as u32 {
                return refuse("--cpu-latency-us", format!("{us} is above {}", i32::MAX));
            }
        }
        for (flag, cpus) in [
            ("--cpus", &self.client_cpus),
            ("--server-cpus", &self.server_cpus),
        ] {
            if let Some(list) = cpus {
                if list.is_empty() {
                    return refuse(flag, "the CPU list is empty");
                }
                if let Some(c) = list.iter().find(|&&c| c > MAX_CPU) {
                    return refuse(flag, format!("CPU {c} is out of range"));
                }
            }
        }
        Ok(())
    }
}

/// How a side waits for the next message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum PollMode {
    /// Blocking calls, woken through the interrupt path.
    Block,
    /// Non-blocking calls in a loop: one core at 100 %.
    Busy,
    /// Spin for `spin_us` after the last message, then block until the next.
    Hybrid { spin_us: u32 },
}

impl PollMode {
    pub fn label(&self) -> String {
        match self {
            PollMode::Block => "block".into(),
            PollMode::Busy => "busy".into(),
            PollMode::Hybrid { spin_us } => format!("hybrid={spin_us}us"),
        }
    }
}

/// A refused spec; `flag` is the command-line flag a person would change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {flag}: {reason}")]
pub struct SpecError {
    pub flag: &'static str,
    pub reason: String,
}

fn refuse(flag: &'static str, reason: impl Into<String>) -> Result<(), SpecError> {
    Err(SpecError {
        flag,
        reason: reason.into(),
    })
}

/// `value` within `1..=max`, else refused under `flag`.
pub fn check_count(flag: &'static str, value: u32, max: u32) -> Result<(), SpecError> {
    if value == 0 || value > max {
        return refuse(flag, format!("{value} is not in 1..={max}"));
    }
    Ok(())
}

/// Worker-thread counts of either side, when given.
fn check_threads(client: Option<u32>, server: Option<u32>) -> Result<(), SpecError> {
    for (flag, threads) in [("--threads", client), ("--server-threads", server)] {
        if let Some(t) = threads {
            check_count(flag, t, MAX_THREADS)?;
        }
    }
    Ok(())
}

/// The default spec with one change: a refusal case.
#[cfg(test)]
fn with<S: Default>(tweak: &dyn Fn(&mut S)) -> S {
    let mut s = S::default();
    tweak(&mut s);
    s
}

/// Refusals of a kind's spec, each naming its flag: `(spec, flag)` pairs.
#[cfg(test)]
fn assert_refused<S: std::fmt::Debug>(
    cases: Vec<(S, &str)>,
    validate: impl Fn(&S) -> Result<(), SpecError>,
) {
    for (spec, flag) in cases {
        let err = validate(&spec).expect_err(&format!("{spec:?} should be refused"));
        assert_eq!(err.flag, flag, "{err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_names_are_the_strings() {
        for t in TestName::ALL {
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", t.as_str()));
            assert_eq!(serde_json::from_str::<TestName>(&json).unwrap(), t);
        }
    }

    #[test]
    fn timing_and_execution_refusals_name_the_flag() {
        let t = Timing::measuring(10_000);
        let cases = vec![
            (
                Timing {
                    duration_ms: 0,
                    ..t.clone()
                },
                "--duration",
            ),
            (
                Timing {
                    interval_ms: 10,
                    ..t.clone()
                },
                "--interval",
            ),
            (
                Timing {
                    duration_ms: MAX_DURATION_MS,
                    ..t.clone()
                },
                "--duration",
            ),
            // Near 2^64 the sum once wrapped to a short test and was admitted.
            (
                Timing {
                    duration_ms: u64::MAX - 500,
                    ..t.clone()
                },
                "--duration",
            ),
            (
                Timing {
                    warmup_ms: u64::MAX,
                    cooldown_ms: u64::MAX,
                    ..t.clone()
                },
                "--duration",
            ),
            (
                Timing {
                    interval_ms: u64::MAX,
                    ..t.clone()
                },
                "--interval",
            ),
        ];
        assert_refused(cases, Timing::check);
        let e = Execution::default();
        let cases = vec![
            (
                Execution {
                    server_cpus: Some(vec![]),
                    ..e.clone()
                },
                "--server-cpus",
            ),
            (
                Execution {
                    client_cpus: Some(vec![5000]),
                    ..e.clone()
                },
                "--cpus",
            ),
        ];
        assert_refused(cases, Execution::check);
        assert_eq!(
            Timing {
                interval_ms: 300,
                ..t
            }
            .intervals(),
            34
        );
    }

    #[test]
    fn shared_parts_keep_their_json_names() {
        let spec = TestSpec::Stream(StreamSpec::default());
        let json = serde_json::to_value(&spec).unwrap();
        for key in [
            "duration_ms",
            "warmup_ms",
            "cooldown_ms",
            "interval_ms",
            "engine",
        ] {
            assert!(json.get(key).is_some(), "{key} in {json}");
        }
        assert!(
            json.get("client_cpus_auto").is_none(),
            "cleared flags are not written"
        );
        // A schema-1 spec without the newer fields still reads.
        let mut old = json.clone();
        old.as_object_mut().unwrap().remove("engine");
        let back: TestSpec = serde_json::from_value(old).unwrap();
        assert_eq!(back.execution().engine, Engine::Kernel);
    }
}
