//! The stream spec: TCP bulk transfer over many connections (the ntttcp / iperf3 job).

use serde::{Deserialize, Serialize};

use super::{check_count, check_threads, refuse, Execution, SpecError, Timing, MAX_CONNECTIONS};

/// Largest read/write buffer: beyond this a single syscall stops being a useful unit.
pub const MAX_BUFFER_BYTES: u32 = 64 << 20;

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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamSpec {
    /// Connections per direction.
    pub connections: u32,
    /// Worker threads on the controller; `None`: one per connection, up to a cap.
    pub client_threads: Option<u32>,
    /// Worker threads on the agent; `None`: one per connection, up to a cap.
    pub server_threads: Option<u32>,
    #[serde(flatten)]
    pub timing: Timing,
    /// Bytes per send()/recv() call.
    pub buffer_bytes: u32,
    pub direction: Direction,
    /// TCP congestion control algorithm (TCP_CONGESTION); `None`: the kernel default.
    pub congestion: Option<String>,
    pub nodelay: bool,
    pub sndbuf_bytes: Option<u32>,
    pub rcvbuf_bytes: Option<u32>,
    /// Pacing of each direction's connections together, bits per second of payload, split
    /// evenly over them (SO_MAX_PACING_RATE, as iperf3's `--fq-rate`); `None`: unpaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bits_per_s: Option<f64>,
    /// Senders send without copying (io_uring's `send_zc`, `--zerocopy`; engine uring).
    /// Receivers are unchanged: the kernel copies into their buffers as always.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub zerocopy: bool,
    #[serde(flatten)]
    pub execution: Execution,
}

impl Default for StreamSpec {
    fn default() -> Self {
        StreamSpec {
            connections: 1,
            client_threads: None,
            server_threads: None,
            timing: Timing {
                cooldown_ms: 500,
                ..Timing::measuring(10_000)
            },
            buffer_bytes: 128 * 1024,
            direction: Direction::Forward,
            congestion: None,
            nodelay: false,
            sndbuf_bytes: None,
            rcvbuf_bytes: None,
            rate_bits_per_s: None,
            zerocopy: false,
            execution: Execution::default(),
        }
    }
}

impl StreamSpec {
    /// Connections opened in total, counting both directions of a bidirectional test.
    pub fn total_connections(&self) -> u32 {
        match self.direction {
            // Saturates: limits read it before the spec is validated.
            Direction::Bidir => self.connections.saturating_mul(2),
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

    pub fn validate(&self) -> Result<(), SpecError> {
        check_count("--connections", self.connections, MAX_CONNECTIONS)?;
        check_threads(self.client_threads, self.server_threads)?;
        self.timing.check()?;
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
        if let Some(r) = self.rate_bits_per_s {
            // Per connection it must be a byte rate the kernel takes (a u32 on 32-bit ABIs).
            let least = 8.0 * f64::from(self.total_connections());
            if !(r.is_finite() && r >= least && r <= MAX_RATE_BITS_PER_S) {
                return refuse(
                    "--rate",
                    format!("{r} bit/s is not in {least}..={MAX_RATE_BITS_PER_S:e} (8 bit/s per connection at least)"),
                );
            }
        }
        self.execution.check()
    }

    /// Each connection's pacing, bytes per second (SO_MAX_PACING_RATE), if paced.
    pub fn pacing_bytes_per_s(&self) -> Option<u64> {
        let per = self.rate_bits_per_s? / 8.0 / f64::from(self.connections.max(1));
        Some(per.clamp(1.0, f64::from(u32::MAX - 1)) as u64)
    }
}

/// Highest pacing a stream may ask for: 1 Tbit/s, above any NIC, below the kernel's cap.
pub const MAX_RATE_BITS_PER_S: f64 = 1e12;

#[cfg(test)]
mod tests {
    use super::super::{assert_refused, with, Engine, TestSpec};
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
        let with = with::<StreamSpec>;
        let cases = vec![
            (with(&|s| s.connections = 0), "--connections"),
            (with(&|s| s.connections = 5000), "--connections"),
            (with(&|s| s.client_threads = Some(0)), "--threads"),
            (with(&|s| s.timing.duration_ms = 0), "--duration"),
            (with(&|s| s.buffer_bytes = 0), "--buffer"),
            (
                with(&|s| s.congestion = Some("bb r;".into())),
                "--congestion",
            ),
            (with(&|s| s.rcvbuf_bytes = Some(0)), "--rcvbuf"),
            (with(&|s| s.rate_bits_per_s = Some(f64::NAN)), "--rate"),
            (with(&|s| s.rate_bits_per_s = Some(1e15)), "--rate"),
            (with(&|s| s.connections = u32::MAX), "--connections"),
            (
                with(&|s| s.execution.server_cpus = Some(vec![])),
                "--server-cpus",
            ),
        ];
        assert_refused(cases, StreamSpec::validate);
    }

    #[test]
    fn zerocopy_is_kept_only_when_asked() {
        let off = serde_json::to_string(&StreamSpec::default()).unwrap();
        assert!(!off.contains("zerocopy"), "{off}");
        let mut s = StreamSpec {
            zerocopy: true,
            ..Default::default()
        };
        s.execution.engine = Engine::Uring;
        s.validate().unwrap();
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<StreamSpec>(&json).unwrap(), s);
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
