//! The request/response spec of ping and rpc: `connections` × `window` messages in flight.

use serde::{Deserialize, Serialize};

use super::{
    check_count, check_threads, refuse, Engine, Execution, PollMode, SpecError, Timing,
    MAX_CONNECTIONS,
};

/// Largest request or response of a request/response test over TCP.
pub const MAX_MESSAGE_BYTES: u32 = 1 << 20;
/// Largest UDP message: an IPv4 datagram's payload.
pub const MAX_UDP_MESSAGE_BYTES: u32 = 65_507;
pub const MAX_WINDOW: u32 = 4096;
/// The smallest UDP request: sequence number and the test's cookie, 8 bytes each.
pub const UDP_REQUEST_HEADER_BYTES: u32 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    Tcp,
    Udp,
}

/// A one-off stall injected in the agent's echo path, to test that open-loop runs see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stall {
    /// Since the agent's start of the test.
    pub after_ms: u64,
    pub stall_ms: u64,
}

/// Longest SO_BUSY_POLL a spec may set (as root an agent could set any): 10 ms, 200 times
/// the usual 50 µs.
pub const MAX_BUSY_POLL_US: u32 = 10_000;

/// Bytes at an answer's start (after a UDP answer's echoed header) that carry the echo's
/// figures with `--stages`: `sonde_engine::kstamps::FIGURE_BYTES`.
pub const STAGE_FIGURE_BYTES: u32 = 28;

/// Sampled stages: at most one message in this many is stamped.
pub const MAX_STAGE_EVERY: u32 = 1 << 16;

/// The default sampling of a closed loop with one message in flight (`bench/stages_cost.py`:
/// its cost within the noise of stages off at ping rates, BENCHMARKS.md), and the messages
/// a paced run keeps split at least, so that a stage's P99 rests on tens of messages.
pub const DEFAULT_STAGE_EVERY: u32 = 16;
pub const LEAST_SPLIT: f64 = 2_000.0;
/// The default sampling of a closed loop with sixteen or more messages in flight: its
/// rate is that many times one's until the CPUs are full, where a stamped message costs
/// both ends ~10 us of CPU (the asking sends, the stamped reads, the error queue's reads,
/// the clock readings and the stage records): one in 64 added 2.2 % to rpc -C 32's CPU per
/// message, one in 256 0.3 %; one in 256 still splits ~1,000 messages a second there
/// (BENCHMARKS.md, "Sampled stages at rpc -C 32: one in 256").
pub const BUSY_STAGE_EVERY: u32 = 256;

/// One message in how many a run stamps by default: in a closed loop
/// [`DEFAULT_STAGE_EVERY`] times the messages in flight (`in_flight`: connections times
/// window, rounded up to a power of two), at most [`BUSY_STAGE_EVERY`]; in a paced run
/// fewer, so that it still splits [`LEAST_SPLIT`] messages or all of them (a load's pings
/// at 100/s: all).
pub fn default_stage_every(rate_per_s: Option<f64>, duration_ms: u64, in_flight: u32) -> u32 {
    match rate_per_s {
        None => DEFAULT_STAGE_EVERY
            .saturating_mul(in_flight.clamp(1, BUSY_STAGE_EVERY).next_power_of_two())
            .min(BUSY_STAGE_EVERY),
        Some(r) => {
            let messages = r * duration_ms as f64 / 1e3;
            ((messages / LEAST_SPLIT).floor() as u32).clamp(1, DEFAULT_STAGE_EVERY)
        }
    }
}

/// Longest `--self-noise` run: a minute.
pub const MAX_SELF_NOISE_MS: u64 = 60_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrSpec {
    pub transport: Transport,
    pub connections: u32,
    /// Messages in flight per connection (msg_gen's msg_window).
    pub window: u32,
    pub request_bytes: u32,
    pub response_bytes: u32,
    pub client_threads: Option<u32>,
    pub server_threads: Option<u32>,
    #[serde(flatten)]
    pub timing: Timing,
    /// Requests per second over all connections; `None`: as fast as the loop allows.
    pub rate_per_s: Option<f64>,
    /// With a rate: measure latency from each request's intended send time (open loop),
    /// not from when it was actually sent.
    pub open_loop: bool,
    /// A new TCP connection per request (neper tcp_crr).
    pub connect_per_request: bool,
    pub poll: PollMode,
    /// SO_BUSY_POLL (and SO_PREFER_BUSY_POLL) on the data sockets, microseconds.
    pub busy_poll_us: Option<u32>,
    /// io_uring only: a kernel thread per ring polls its submissions (`IORING_SETUP_SQPOLL`),
    /// so that sending takes no system call; with `--poll busy`, neither does receiving.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sqpoll: bool,
    #[serde(flatten)]
    pub execution: Execution,
    /// Test-only: a stall in the agent's echo path.
    pub server_stall: Option<Stall>,
    /// Before the test, measure the tool's own floor this long on the controller
    /// (`--self-noise`); agents ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_noise_ms: Option<u64>,
    /// Split each round trip into stages from both ends' kernel timestamps (`--stages`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stages: bool,
    /// With stages: one message in this many stamped at both ends (`--stages` sampled,
    /// the default; 1 with `--stages all`). Absent (a previous build's spec): every one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_every: Option<u32>,
    /// With stages: which stamps they are taken from (`--stamps`); software by default.
    #[serde(
        default,
        skip_serializing_if = "crate::stamps::StampSource::is_software"
    )]
    pub stamps: crate::stamps::StampSource,
    /// Test-only: the echo tells its arrival stamps this many ns off (a clock off by as
    /// much), to prove the one-way offset is found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_clock_shift_ns: Option<i64>,
}

impl Default for RrSpec {
    fn default() -> Self {
        RrSpec {
            transport: Transport::Tcp,
            connections: 1,
            window: 1,
            request_bytes: 64,
            response_bytes: 64,
            client_threads: None,
            server_threads: None,
            timing: Timing::measuring(10_000),
            rate_per_s: None,
            open_loop: false,
            connect_per_request: false,
            poll: PollMode::Block,
            busy_poll_us: None,
            sqpoll: false,
            execution: Execution::default(),
            server_stall: None,
            server_clock_shift_ns: None,
            self_noise_ms: None,
            stages: false,
            stage_every: None,
            stamps: crate::stamps::StampSource::Software,
        }
    }
}

impl RrSpec {
    /// Connections opened up front (none for connect-per-request, one socket for UDP).
    pub fn initial_connections(&self) -> u32 {
        if self.connect_per_request {
            0
        } else {
            self.connections
        }
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        check_count("--connections", self.connections, MAX_CONNECTIONS)?;
        check_count("--window", self.window, MAX_WINDOW)?;
        self.check_sizes()?;
        check_threads(self.client_threads, self.server_threads)?;
        self.timing.check()?;
        if let Some(us) = self.busy_poll_us.filter(|&us| us > MAX_BUSY_POLL_US) {
            return refuse(
                "--busy-poll-us",
                format!("{us} µs is above {MAX_BUSY_POLL_US}: a receive would spin that long on the agent's CPU"),
            );
        }
        if let Some(r) = self.rate_per_s {
            if !(r.is_finite() && r > 0.0 && r <= 1e8) {
                return refuse(
                    "--rate",
                    format!("{r} is not a rate in (0, 1e8] per second"),
                );
            }
        }
        if self.open_loop && self.rate_per_s.is_none() {
            return refuse("--rate", "an open-loop run needs a rate");
        }
        if self.transport == Transport::Udp && self.connect_per_request {
            return refuse(
                "--crr",
                format!(
                    "a new connection per request is TCP's, not UDP's (--udp, --engine {})",
                    Engine::Xdp
                ),
            );
        }
        self.check_self_noise()?;
        self.check_stages()?;
        if self.connect_per_request && self.window != 1 {
            return refuse("--window", "--crr sends one request per connection");
        }
        if let PollMode::Hybrid { spin_us } = self.poll {
            if spin_us == 0 || spin_us > 1_000_000 {
                return refuse(
                    "--poll",
                    format!("hybrid spin of {spin_us} us is not in 1..=1000000"),
                );
            }
        }
        self.execution.check()
    }

    /// The floor is the kernel-socket loop's, over local sockets: a bypass engine's loop
    /// or a new connection per request has none to compare with.
    fn check_self_noise(&self) -> Result<(), SpecError> {
        let Some(ms) = self.self_noise_ms else {
            return Ok(());
        };
        if ms == 0 || ms > MAX_SELF_NOISE_MS {
            return refuse(
                "--self-noise",
                format!("{ms} ms is not in 1..={MAX_SELF_NOISE_MS} ms"),
            );
        }
        if self.execution.engine != Engine::Kernel {
            return refuse(
                "--self-noise",
                format!(
                    "not with --engine {}: the floor is the kernel-socket loop's",
                    self.execution.engine
                ),
            );
        }
        if self.connect_per_request {
            return refuse(
                "--self-noise",
                "not with --crr: the floor is the loop over open connections",
            );
        }
        Ok(())
    }

    /// With stages, one message in this many is stamped (1: every one).
    pub fn stage_every(&self) -> u32 {
        self.stage_every.unwrap_or(1).max(1)
    }

    /// Answers with stages need room for the echo's figures, after what a UDP answer
    /// echoes (the engine that takes them refuses what it cannot run: `kind::refuse`).
    fn check_stages(&self) -> Result<(), SpecError> {
        if !self.stages {
            if !self.stamps.is_software() {
                return refuse(
                    "--stamps",
                    format!(
                        "--stamps {} chooses the stamps of --stages, which is off",
                        self.stamps
                    ),
                );
            }
            return Ok(());
        }
        if let Some(n) = self.stage_every.filter(|&n| n == 0 || n > MAX_STAGE_EVERY) {
            return refuse(
                "--stages",
                format!("one message in {n} is not in 1..={MAX_STAGE_EVERY}"),
            );
        }
        let least = match self.transport {
            Transport::Tcp => STAGE_FIGURE_BYTES,
            Transport::Udp => UDP_REQUEST_HEADER_BYTES + STAGE_FIGURE_BYTES,
        };
        if self.response_bytes < least {
            return refuse(
                "--stages",
                format!(
                    "answers of {} bytes have no room for the echo's figures: use --resp-size {least} or more",
                    self.response_bytes
                ),
            );
        }
        Ok(())
    }

    /// A UDP request carries an 8-byte sequence number and the test's 8-byte cookie; its
    /// echo, the sequence number.
    fn check_sizes(&self) -> Result<(), SpecError> {
        let (least_request, least_response, cap) = match self.transport {
            Transport::Tcp => (1, 1, MAX_MESSAGE_BYTES),
            Transport::Udp => (UDP_REQUEST_HEADER_BYTES, 8, MAX_UDP_MESSAGE_BYTES),
        };
        for (flag, v, least) in [
            ("--req-size", self.request_bytes, least_request),
            ("--resp-size", self.response_bytes, least_response),
        ] {
            if v < least || v > cap {
                let why = match least {
                    1 => "",
                    8 => ", whose answers carry an 8-byte sequence number",
                    _ => ", whose requests carry an 8-byte sequence number and the test's cookie",
                };
                return refuse(
                    flag,
                    format!(
                        "{v} bytes is not in {least}..={cap} (protocol limit for {:?}{why})",
                        self.transport
                    ),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{assert_refused, with, TestSpec};
    use super::*;

    /// A previous build's spec has no sampling: its stages are every message's; a spec
    /// with sampling keeps it across the wire.
    #[test]
    fn a_spec_without_sampling_stamps_every_message() {
        let mut old = serde_json::to_value(RrSpec {
            stages: true,
            ..RrSpec::default()
        })
        .unwrap();
        old.as_object_mut().unwrap().remove("stage_every");
        let back: RrSpec = serde_json::from_value(old).unwrap();
        assert_eq!((back.stages, back.stage_every()), (true, 1));
        let new = RrSpec {
            stages: true,
            stage_every: Some(16),
            ..RrSpec::default()
        };
        let back: RrSpec = serde_json::from_value(serde_json::to_value(&new).unwrap()).unwrap();
        assert_eq!(back.stage_every(), 16);
        assert_eq!(default_stage_every(None, 10_000, 1), DEFAULT_STAGE_EVERY);
        assert_eq!(default_stage_every(None, 10_000, 2), 32);
        assert_eq!(default_stage_every(None, 10_000, 3), 64);
        assert_eq!(default_stage_every(None, 10_000, 16), BUSY_STAGE_EVERY);
        assert_eq!(default_stage_every(None, 10_000, 32), BUSY_STAGE_EVERY);
        assert_eq!(
            default_stage_every(None, 10_000, u32::MAX),
            BUSY_STAGE_EVERY
        );
        assert_eq!(default_stage_every(Some(100.0), 10_000, 1), 1);
        assert_eq!(default_stage_every(Some(1_000.0), 10_000, 8), 5);
        assert_eq!(
            default_stage_every(Some(1e6), 10_000, 8),
            DEFAULT_STAGE_EVERY
        );
    }

    #[test]
    fn rr_refusals_name_the_flag() {
        let d = RrSpec::default();
        let with = with::<RrSpec>;
        let udp = |s: &mut RrSpec| s.transport = Transport::Udp;
        let cases = vec![
            (with(&|s| s.window = 0), "--window"),
            (
                with(&|s| s.request_bytes = MAX_MESSAGE_BYTES + 1),
                "--req-size",
            ),
            (
                with(&|s| {
                    udp(s);
                    s.response_bytes = 70_000
                }),
                "--resp-size",
            ),
            (
                with(&|s| {
                    udp(s);
                    s.request_bytes = 7
                }),
                "--req-size",
            ),
            (
                with(&|s| {
                    udp(s);
                    s.request_bytes = 15
                }),
                "--req-size",
            ),
            (with(&|s| s.rate_per_s = Some(0.0)), "--rate"),
            (with(&|s| s.open_loop = true), "--rate"),
            (
                with(&|s| {
                    s.connect_per_request = true;
                    s.window = 4
                }),
                "--window",
            ),
            (
                with(&|s| s.poll = PollMode::Hybrid { spin_us: 0 }),
                "--poll",
            ),
            (
                with(&|s| {
                    udp(s);
                    s.connect_per_request = true
                }),
                "--crr",
            ),
            (with(&|s| s.busy_poll_us = Some(10_001)), "--busy-poll-us"),
            (with(&|s| s.self_noise_ms = Some(0)), "--self-noise"),
            (
                with(&|s| {
                    s.stages = true;
                    s.stage_every = Some(0)
                }),
                "--stages",
            ),
            (
                with(&|s| {
                    s.stages = true;
                    s.response_bytes = STAGE_FIGURE_BYTES - 1
                }),
                "--stages",
            ),
            (
                with(&|s| {
                    udp(s);
                    s.stages = true;
                    s.response_bytes = UDP_REQUEST_HEADER_BYTES + STAGE_FIGURE_BYTES - 1
                }),
                "--stages",
            ),
            (
                with(&|s| {
                    s.self_noise_ms = Some(1000);
                    s.connect_per_request = true
                }),
                "--self-noise",
            ),
            (
                with(&|s| {
                    udp(s);
                    s.self_noise_ms = Some(1000);
                    s.execution.engine = Engine::Xdp
                }),
                "--self-noise",
            ),
        ];
        assert_refused(cases, RrSpec::validate);
        d.validate().unwrap();
        // UDP keeps a window of requests in flight: replies are matched by sequence.
        with(&|s| {
            udp(s);
            s.window = 32
        })
        .validate()
        .unwrap();
    }

    #[test]
    fn rpc_round_trips_with_its_poll_mode() {
        let t = TestSpec::Rpc(RrSpec {
            poll: PollMode::Hybrid { spin_us: 50 },
            ..Default::default()
        });
        let json = serde_json::to_string(&t).unwrap();
        assert!(
            json.contains("\"test\":\"rpc\"") && json.contains("\"mode\":\"hybrid\""),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<TestSpec>(&json).unwrap(), t);
    }
}
