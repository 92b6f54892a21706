//! What a test asks for. A `TestSpec` travels from the controller to the agent in `Setup`
//! and is stored in the result document, so every field is plain, serialisable and named
//! with its unit. Validation lives here so that both sides refuse the same bad values.

use serde::{Deserialize, Serialize};

/// Largest number of data connections one test may open (each is a socket on both sides).
pub const MAX_CONNECTIONS: u32 = 1024;
/// Largest read/write buffer: beyond this a single syscall stops being a useful unit.
pub const MAX_BUFFER_BYTES: u32 = 64 << 20;
/// Longest test the agent accepts: a day. Bounds every loop that sends.
pub const MAX_DURATION_MS: u64 = 24 * 3600 * 1000;
pub const MIN_INTERVAL_MS: u64 = 100;
pub const MAX_THREADS: u32 = 1024;

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
}

impl TestSpec {
    pub fn name(&self) -> &'static str {
        match self {
            TestSpec::Stream(_) => "stream",
            TestSpec::Ping(_) => "ping",
            TestSpec::Rpc(_) => "rpc",
            TestSpec::Pps(_) => "pps",
        }
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        match self {
            TestSpec::Stream(s) => s.validate(),
            TestSpec::Ping(r) | TestSpec::Rpc(r) => r.validate(),
            TestSpec::Pps(p) => p.validate(),
        }
    }

    /// Time from start until senders stop: warm-up, window, cool-down.
    pub fn total_ms(&self) -> u64 {
        match self {
            TestSpec::Stream(s) => s.total_ms(),
            TestSpec::Ping(r) | TestSpec::Rpc(r) => r.total_ms(),
            TestSpec::Pps(p) => p.warmup_ms + p.duration_ms,
        }
    }

    pub fn interval_ms(&self) -> u64 {
        match self {
            TestSpec::Stream(s) => s.interval_ms,
            TestSpec::Ping(r) | TestSpec::Rpc(r) => r.interval_ms,
            TestSpec::Pps(p) => p.interval_ms,
        }
    }

    pub fn warmup_ms(&self) -> u64 {
        match self {
            TestSpec::Stream(s) => s.warmup_ms,
            TestSpec::Ping(r) | TestSpec::Rpc(r) => r.warmup_ms,
            TestSpec::Pps(p) => p.warmup_ms,
        }
    }

    /// Intervals in the measured window: the agent sends one sample for each.
    pub fn intervals(&self) -> u64 {
        let (duration, interval) = match self {
            TestSpec::Stream(s) => (s.duration_ms, s.interval_ms),
            TestSpec::Ping(r) | TestSpec::Rpc(r) => (r.duration_ms, r.interval_ms),
            TestSpec::Pps(p) => (p.duration_ms, p.interval_ms),
        };
        duration.div_ceil(interval.max(1))
    }

    /// Time after the window before the controller asks for results (cool-down).
    pub fn cooldown_ms(&self) -> u64 {
        match self {
            TestSpec::Stream(s) => s.cooldown_ms,
            TestSpec::Ping(r) | TestSpec::Rpc(r) => r.cooldown_ms,
            TestSpec::Pps(_) => 0,
        }
    }
}

/// Which way the bytes go, seen from the controller (the side that ran `sonde stream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Controller sends, agent receives (ntttcp -s on the controller).
    Forward,
    /// Agent sends, controller receives (iperf3 -R).
    Reverse,
    /// Both at once, on separate connections (iperf3 --bidir).
    Bidir,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Forward => "forward",
            Direction::Reverse => "reverse",
            Direction::Bidir => "bidir",
        }
    }
}

/// TCP bulk transfer over many connections (the ntttcp / iperf3 job).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamSpec {
    /// Connections per direction.
    pub connections: u32,
    /// Worker threads on the controller; `None`: one per connection, up to a cap.
    pub client_threads: Option<u32>,
    /// Worker threads on the agent; `None`: one per connection, up to a cap.
    pub server_threads: Option<u32>,
    pub duration_ms: u64,
    pub warmup_ms: u64,
    pub cooldown_ms: u64,
    pub interval_ms: u64,
    /// Bytes per send()/recv() call.
    pub buffer_bytes: u32,
    pub direction: Direction,
    /// TCP congestion control algorithm (TCP_CONGESTION); `None`: the kernel default.
    pub congestion: Option<String>,
    pub nodelay: bool,
    pub sndbuf_bytes: Option<u32>,
    pub rcvbuf_bytes: Option<u32>,
    /// CPUs the controller's workers are pinned to, round robin; `None`: not pinned.
    pub client_cpus: Option<Vec<usize>>,
    /// CPUs the agent's workers are pinned to, round robin; `None`: not pinned.
    pub server_cpus: Option<Vec<usize>>,
    /// The agent chooses its CPUs itself (`--server-cpus auto`), on its own host.
    #[serde(default)]
    pub server_cpus_auto: bool,
}

impl Default for StreamSpec {
    fn default() -> Self {
        StreamSpec {
            connections: 1,
            client_threads: None,
            server_threads: None,
            duration_ms: 10_000,
            warmup_ms: 1_000,
            cooldown_ms: 500,
            interval_ms: 1_000,
            buffer_bytes: 128 * 1024,
            direction: Direction::Forward,
            congestion: None,
            nodelay: false,
            sndbuf_bytes: None,
            rcvbuf_bytes: None,
            client_cpus: None,
            server_cpus: None,
            server_cpus_auto: false,
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

/// Worker-thread counts of either side, when given.
fn check_threads(client: Option<u32>, server: Option<u32>) -> Result<(), SpecError> {
    for (flag, threads) in [("--threads", client), ("--server-threads", server)] {
        if let Some(t) = threads {
            if t == 0 || t > MAX_THREADS {
                return refuse(flag, format!("{t} is not in 1..={MAX_THREADS}"));
            }
        }
    }
    Ok(())
}

/// The measured window, the whole test's length, and the report interval.
fn check_timing(duration_ms: u64, total_ms: u64, interval_ms: u64) -> Result<(), SpecError> {
    if duration_ms == 0 {
        return refuse("--duration", "must be more than 0 s");
    }
    if total_ms > MAX_DURATION_MS {
        return refuse("--duration", "warm-up + duration + cool-down exceeds 24 h");
    }
    if interval_ms < MIN_INTERVAL_MS {
        return refuse(
            "--interval",
            format!("{interval_ms} ms is below the minimum of {MIN_INTERVAL_MS} ms"),
        );
    }
    Ok(())
}

impl StreamSpec {
    /// Connections opened in total, counting both directions of a bidirectional test.
    pub fn total_connections(&self) -> u32 {
        match self.direction {
            Direction::Bidir => self.connections * 2,
            _ => self.connections,
        }
    }

    /// Direction of the connection with test-wide index `index`: in a bidirectional test
    /// the first `connections` go forward, the rest in reverse.
    pub fn direction_of(&self, index: u32) -> Direction {
        match self.direction {
            Direction::Bidir if index >= self.connections => Direction::Reverse,
            Direction::Bidir => Direction::Forward,
            d => d,
        }
    }

    /// Time from start until the senders stop: warm-up, measured window, cool-down.
    pub fn total_ms(&self) -> u64 {
        self.warmup_ms + self.duration_ms + self.cooldown_ms
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        if self.connections == 0 || self.connections > MAX_CONNECTIONS {
            return refuse(
                "--connections",
                format!("{} is not in 1..={MAX_CONNECTIONS}", self.connections),
            );
        }
        check_threads(self.client_threads, self.server_threads)?;
        check_timing(self.duration_ms, self.total_ms(), self.interval_ms)?;
        if self.buffer_bytes == 0 || self.buffer_bytes > MAX_BUFFER_BYTES {
            return refuse(
                "--buffer",
                format!(
                    "{} bytes is not in 1..={MAX_BUFFER_BYTES}",
                    self.buffer_bytes
                ),
            );
        }
        if let Some(cc) = &self.congestion {
            let ok = !cc.is_empty()
                && cc.len() < 16
                && cc.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !ok {
                return refuse("--congestion", format!("'{cc}' is not an algorithm name"));
            }
        }
        for (flag, v) in [
            ("--sndbuf", self.sndbuf_bytes),
            ("--rcvbuf", self.rcvbuf_bytes),
        ] {
            if v == Some(0) {
                return refuse(flag, "must be more than 0 bytes");
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
                if let Some(c) = list.iter().find(|&&c| c >= 4096) {
                    return refuse(flag, format!("CPU {c} is out of range"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_round_trips() {
        let spec = TestSpec::Stream(StreamSpec::default());
        spec.validate().unwrap();
        let json = serde_json::to_string(&spec).unwrap();
        assert!(json.contains("\"test\":\"stream\""));
        assert_eq!(serde_json::from_str::<TestSpec>(&json).unwrap(), spec);
    }

    #[test]
    fn refusals_name_the_flag() {
        let cases: Vec<(StreamSpec, &str)> = vec![
            (
                StreamSpec {
                    connections: 0,
                    ..Default::default()
                },
                "--connections",
            ),
            (
                StreamSpec {
                    connections: 5000,
                    ..Default::default()
                },
                "--connections",
            ),
            (
                StreamSpec {
                    client_threads: Some(0),
                    ..Default::default()
                },
                "--threads",
            ),
            (
                StreamSpec {
                    duration_ms: 0,
                    ..Default::default()
                },
                "--duration",
            ),
            (
                StreamSpec {
                    interval_ms: 10,
                    ..Default::default()
                },
                "--interval",
            ),
            (
                StreamSpec {
                    buffer_bytes: 0,
                    ..Default::default()
                },
                "--buffer",
            ),
            (
                StreamSpec {
                    congestion: Some("bb r;".into()),
                    ..Default::default()
                },
                "--congestion",
            ),
            (
                StreamSpec {
                    rcvbuf_bytes: Some(0),
                    ..Default::default()
                },
                "--rcvbuf",
            ),
            (
                StreamSpec {
                    server_cpus: Some(vec![]),
                    ..Default::default()
                },
                "--server-cpus",
            ),
        ];
        for (spec, flag) in cases {
            let err = spec.validate().unwrap_err();
            assert_eq!(err.flag, flag, "{err}");
        }
    }

    #[test]
    fn bidir_doubles_connections() {
        let s = StreamSpec {
            connections: 4,
            direction: Direction::Bidir,
            ..Default::default()
        };
        assert_eq!(s.total_connections(), 8);
        assert_eq!(s.direction_of(3), Direction::Forward);
        assert_eq!(s.direction_of(4), Direction::Reverse);
    }
}

/// Largest request or response of a request/response test over TCP.
pub const MAX_MESSAGE_BYTES: u32 = 1 << 20;
/// Largest UDP message: an IPv4 datagram's payload.
pub const MAX_UDP_MESSAGE_BYTES: u32 = 65_507;
pub const MAX_WINDOW: u32 = 4096;

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

/// Request/response: `connections` × `window` messages in flight.
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
    pub duration_ms: u64,
    pub warmup_ms: u64,
    pub cooldown_ms: u64,
    pub interval_ms: u64,
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
    pub client_cpus: Option<Vec<usize>>,
    pub server_cpus: Option<Vec<usize>>,
    /// The agent chooses its CPUs itself (`--server-cpus auto`), on its own host.
    #[serde(default)]
    pub server_cpus_auto: bool,
    /// Test-only: a stall in the agent's echo path.
    pub server_stall: Option<Stall>,
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
            duration_ms: 10_000,
            warmup_ms: 1_000,
            cooldown_ms: 0,
            interval_ms: 1_000,
            rate_per_s: None,
            open_loop: false,
            connect_per_request: false,
            poll: PollMode::Block,
            busy_poll_us: None,
            client_cpus: None,
            server_cpus: None,
            server_cpus_auto: false,
            server_stall: None,
        }
    }
}

impl RrSpec {
    pub fn total_ms(&self) -> u64 {
        self.warmup_ms + self.duration_ms + self.cooldown_ms
    }

    /// Connections opened up front (none for connect-per-request, one socket for UDP).
    pub fn initial_connections(&self) -> u32 {
        if self.connect_per_request {
            0
        } else {
            self.connections
        }
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        if self.connections == 0 || self.connections > MAX_CONNECTIONS {
            return refuse(
                "--connections",
                format!("{} is not in 1..={MAX_CONNECTIONS}", self.connections),
            );
        }
        if self.window == 0 || self.window > MAX_WINDOW {
            return refuse(
                "--window",
                format!("{} is not in 1..={MAX_WINDOW}", self.window),
            );
        }
        // A UDP request and its echo carry the request's 8-byte sequence number.
        let (least, cap) = match self.transport {
            Transport::Tcp => (1, MAX_MESSAGE_BYTES),
            Transport::Udp => (8, MAX_UDP_MESSAGE_BYTES),
        };
        for (flag, v) in [
            ("--req-size", self.request_bytes),
            ("--resp-size", self.response_bytes),
        ] {
            if v < least || v > cap {
                return refuse(
                    flag,
                    format!(
                        "{v} bytes is not in {least}..={cap} (protocol limit for {:?}{})",
                        self.transport,
                        if least > 1 {
                            ", whose messages carry an 8-byte sequence number"
                        } else {
                            ""
                        }
                    ),
                );
            }
        }
        check_threads(self.client_threads, self.server_threads)?;
        check_timing(self.duration_ms, self.total_ms(), self.interval_ms)?;
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
        if self.transport == Transport::Udp && (self.window != 1 || self.connect_per_request) {
            return refuse(
                "--udp",
                "UDP runs one message in flight on one socket per connection",
            );
        }
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
        for (flag, cpus) in [
            ("--cpus", &self.client_cpus),
            ("--server-cpus", &self.server_cpus),
        ] {
            if let Some(list) = cpus {
                if list.is_empty() {
                    return refuse(flag, "the CPU list is empty");
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod rr_tests {
    use super::*;

    #[test]
    fn rr_refusals_name_the_flag() {
        let cases: Vec<(RrSpec, &str)> = vec![
            (
                RrSpec {
                    window: 0,
                    ..Default::default()
                },
                "--window",
            ),
            (
                RrSpec {
                    request_bytes: MAX_MESSAGE_BYTES + 1,
                    ..Default::default()
                },
                "--req-size",
            ),
            (
                RrSpec {
                    transport: Transport::Udp,
                    response_bytes: 70_000,
                    ..Default::default()
                },
                "--resp-size",
            ),
            (
                RrSpec {
                    rate_per_s: Some(0.0),
                    ..Default::default()
                },
                "--rate",
            ),
            (
                RrSpec {
                    open_loop: true,
                    ..Default::default()
                },
                "--rate",
            ),
            (
                RrSpec {
                    connect_per_request: true,
                    window: 4,
                    ..Default::default()
                },
                "--window",
            ),
            (
                RrSpec {
                    poll: PollMode::Hybrid { spin_us: 0 },
                    ..Default::default()
                },
                "--poll",
            ),
            (
                RrSpec {
                    transport: Transport::Udp,
                    window: 2,
                    ..Default::default()
                },
                "--udp",
            ),
        ];
        for (spec, flag) in cases {
            assert_eq!(spec.validate().unwrap_err().flag, flag);
        }
        RrSpec::default().validate().unwrap();
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

/// Ethernet (14) + IPv4 (20) + UDP (8) bytes around a UDP payload, as testpmd counts a
/// packet's length (no preamble, no FCS).
pub const PACKET_OVERHEAD_BYTES: u32 = 42;
/// Ethernet (14) + IPv6 (40) + UDP (8) header bytes.
pub const PACKET_OVERHEAD_BYTES_V6: u32 = 62;
/// sonde's header in every packet: cookie, flow, sequence number.
pub const PACKET_HEADER_BYTES: u32 = 16;
pub const MIN_PACKET_BYTES: u32 = PACKET_OVERHEAD_BYTES + PACKET_HEADER_BYTES;
/// A jumbo frame; the controller also checks the size against the interface's MTU.
pub const MAX_PACKET_BYTES: u32 = 9014;
pub const MAX_FLOWS: u32 = 4096;
pub const MAX_BATCH: u32 = 1024;

/// Small-packet rate: the controller sends UDP packets, the agent receives them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PpsSpec {
    /// Bytes per packet on the wire: Ethernet + IPv4 + UDP headers + payload, no FCS.
    pub size_bytes: u32,
    pub tx_threads: u32,
    /// SO_REUSEPORT receivers on the agent, one thread each.
    pub rx_threads: u32,
    /// Flows, each its own source port, so RSS and SO_REUSEPORT spread them.
    pub flows: u32,
    /// Packets per sendmmsg/recvmmsg call (per GSO send with `gso`).
    pub batch: u32,
    /// UDP GSO on the sender: one send per batch, segmented by the kernel (as by a NIC's
    /// segmentation offload); the packets that reach the receiver are the same.
    #[serde(default)]
    pub gso: bool,
    /// Offered packets per second over all senders; `None`: as fast as possible.
    pub rate_pps: Option<f64>,
    pub duration_ms: u64,
    pub warmup_ms: u64,
    pub interval_ms: u64,
    pub poll: PollMode,
    pub client_cpus: Option<Vec<usize>>,
    pub server_cpus: Option<Vec<usize>>,
    /// The agent chooses its CPUs itself (`--server-cpus auto`), on its own host.
    #[serde(default)]
    pub server_cpus_auto: bool,
    /// The packets are IPv6 (set by the controller from the agent's address): 62 bytes of
    /// headers instead of 42.
    #[serde(default)]
    pub ipv6: bool,
}

impl Default for PpsSpec {
    fn default() -> Self {
        PpsSpec {
            size_bytes: 64,
            tx_threads: 1,
            rx_threads: 1,
            flows: 1,
            batch: 32,
            gso: false,
            rate_pps: None,
            duration_ms: 10_000,
            warmup_ms: 1_000,
            interval_ms: 1_000,
            poll: PollMode::Block,
            client_cpus: None,
            server_cpus: None,
            server_cpus_auto: false,
            ipv6: false,
        }
    }
}

impl PpsSpec {
    /// Ethernet, IP and UDP header bytes of one packet, for its address family.
    pub fn overhead_bytes(&self) -> u32 {
        if self.ipv6 {
            PACKET_OVERHEAD_BYTES_V6
        } else {
            PACKET_OVERHEAD_BYTES
        }
    }

    pub fn payload_bytes(&self) -> u32 {
        self.size_bytes.saturating_sub(self.overhead_bytes())
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        let least = self.overhead_bytes() + PACKET_HEADER_BYTES;
        if self.size_bytes < least || self.size_bytes > MAX_PACKET_BYTES {
            return refuse(
                "--size",
                format!(
                    "{} bytes is not in {least}..={MAX_PACKET_BYTES} ({} bytes of Ethernet/{}/UDP headers + {PACKET_HEADER_BYTES} of sonde's header at least)",
                    self.size_bytes,
                    self.overhead_bytes(),
                    if self.ipv6 { "IPv6" } else { "IPv4" },
                ),
            );
        }
        if self.flows == 0 || self.flows > MAX_FLOWS {
            return refuse(
                "--flows",
                format!("{} is not in 1..={MAX_FLOWS}", self.flows),
            );
        }
        for (flag, t) in [
            ("--tx-threads", self.tx_threads),
            ("--rx-threads", self.rx_threads),
        ] {
            if t == 0 || t > MAX_THREADS {
                return refuse(flag, format!("{t} is not in 1..={MAX_THREADS}"));
            }
        }
        if self.batch == 0 || self.batch > MAX_BATCH {
            return refuse(
                "--batch",
                format!("{} is not in 1..={MAX_BATCH}", self.batch),
            );
        }
        if let Some(r) = self.rate_pps {
            if !(r.is_finite() && r > 0.0 && r <= 1e9) {
                return refuse("--rate", format!("{r} is not a packet rate in (0, 1e9]"));
            }
        }
        check_timing(
            self.duration_ms,
            self.warmup_ms + self.duration_ms,
            self.interval_ms,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod pps_tests {
    use super::*;

    #[test]
    fn pps_refusals_name_the_flag() {
        let cases: Vec<(PpsSpec, &str)> = vec![
            (
                PpsSpec {
                    size_bytes: 57,
                    ..Default::default()
                },
                "--size",
            ),
            (
                PpsSpec {
                    size_bytes: 10_000,
                    ..Default::default()
                },
                "--size",
            ),
            (
                PpsSpec {
                    flows: 0,
                    ..Default::default()
                },
                "--flows",
            ),
            (
                PpsSpec {
                    batch: 0,
                    ..Default::default()
                },
                "--batch",
            ),
            (
                PpsSpec {
                    rx_threads: 0,
                    ..Default::default()
                },
                "--rx-threads",
            ),
            (
                PpsSpec {
                    rate_pps: Some(-1.0),
                    ..Default::default()
                },
                "--rate",
            ),
        ];
        for (spec, flag) in cases {
            assert_eq!(spec.validate().unwrap_err().flag, flag);
        }
        let ok = PpsSpec::default();
        ok.validate().unwrap();
        assert_eq!(ok.payload_bytes(), 22);
        let v6 = PpsSpec {
            ipv6: true,
            ..ok.clone()
        };
        assert_eq!(v6.payload_bytes(), 2);
        let e = v6.validate().unwrap_err();
        assert!(e.flag == "--size" && e.reason.contains("78..="), "{e:?}");
        let v6 = PpsSpec {
            size_bytes: 78,
            ..v6
        };
        assert_eq!(v6.payload_bytes(), 16);
        assert!(v6.validate().is_ok());
    }
}
