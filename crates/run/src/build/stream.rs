//! `stream`: its options into a spec, the direction chosen from `reverse` and `bidir`.

use sonde_results::{Direction, Execution, SpecError, StreamSpec, TestSpec, Timing};

use super::check::checked;

/// What a stream test was asked for.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    pub connections: u32,
    pub threads: Option<u32>,
    pub server_threads: Option<u32>,
    pub timing: Timing,
    pub buffer: u32,
    /// The agent sends.
    pub reverse: bool,
    /// Both directions at once (wins over `reverse`).
    pub bidir: bool,
    pub congestion: Option<String>,
    pub nodelay: bool,
    pub sndbuf: Option<u32>,
    pub rcvbuf: Option<u32>,
    /// Bits per second of each direction's connections together.
    pub rate: Option<f64>,
    /// Senders send without copying (`send_zc`; engine uring).
    pub zerocopy: bool,
    pub execution: Execution,
}

impl StreamOptions {
    pub fn spec(&self) -> Result<TestSpec, SpecError> {
        checked(TestSpec::Stream(StreamSpec {
            connections: self.connections,
            client_threads: self.threads,
            server_threads: self.server_threads,
            timing: self.timing.clone(),
            buffer_bytes: self.buffer,
            direction: if self.bidir {
                Direction::Bidir
            } else if self.reverse {
                Direction::Reverse
            } else {
                Direction::Forward
            },
            congestion: self.congestion.clone(),
            nodelay: self.nodelay,
            sndbuf_bytes: self.sndbuf,
            rcvbuf_bytes: self.rcvbuf,
            rate_bits_per_s: self.rate,
            zerocopy: self.zerocopy,
            execution: self.execution.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The options of `sonde stream HOST` with no flags.
    fn options() -> StreamOptions {
        StreamOptions {
            connections: 1,
            threads: None,
            server_threads: None,
            timing: Timing {
                duration_ms: 10_000,
                warmup_ms: 1000,
                cooldown_ms: 500,
                interval_ms: 1000,
            },
            buffer: 128 << 10,
            reverse: false,
            bidir: false,
            congestion: None,
            nodelay: false,
            sndbuf: None,
            rcvbuf: None,
            rate: None,
            zerocopy: false,
            execution: Execution::default(),
        }
    }

    fn spec_of(o: &StreamOptions) -> Result<StreamSpec, SpecError> {
        o.spec().map(|s| match s {
            TestSpec::Stream(s) => s,
            _ => unreachable!(),
        })
    }

    #[test]
    fn options_become_a_spec() {
        let mut o = options();
        (o.connections, o.bidir, o.buffer) = (8, true, 64 << 10);
        let s = spec_of(&o).unwrap();
        assert_eq!(s.connections, 8);
        assert_eq!(s.direction, Direction::Bidir);
        assert_eq!(s.buffer_bytes, 65536);
        assert_eq!(s.timing.cooldown_ms, 500);
        o.bidir = false;
        o.reverse = true;
        assert_eq!(spec_of(&o).unwrap().direction, Direction::Reverse);
        o.connections = 0;
        assert_eq!(spec_of(&o).unwrap_err().flag, "--connections");
    }

    #[test]
    fn zerocopy_needs_the_uring_engine() {
        let mut o = options();
        o.zerocopy = true;
        let e = spec_of(&o).unwrap_err();
        assert_eq!(e.flag, "--zerocopy");
        assert!(e.reason.contains("--engine uring"), "{e}");
        o.execution.engine = sonde_results::Engine::Uring;
        assert!(spec_of(&o).unwrap().zerocopy);
        // Without --engine, --zerocopy asks for io_uring; the default is otherwise kernel.
        o.execution.engine = sonde_results::Engine::Kernel;
        o.execution.engine_auto = true;
        let s = spec_of(&o).unwrap();
        assert_eq!(s.execution.engine, sonde_results::Engine::Uring);
        o.zerocopy = false;
        assert_eq!(
            spec_of(&o).unwrap().execution.engine,
            sonde_results::Engine::Kernel
        );
    }

    #[test]
    fn an_engine_stream_lacks_is_named() {
        let mut o = options();
        o.execution.engine = sonde_results::Engine::Dpdk;
        let e = spec_of(&o).unwrap_err();
        assert_eq!(e.flag, "--engine");
        assert!(e.reason.contains("kernel"), "{e}");
    }
}
