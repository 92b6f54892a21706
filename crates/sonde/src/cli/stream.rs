//! `sonde stream`: TCP bulk throughput over many connections (the ntttcp / iperf3 job).

use clap::Args;
use sonde_results::{SpecError, StreamSpec};
use sonde_run::build::stream;
use sonde_run::measure::Plan;

use super::flags::{
    parse_bits, parse_duration_ms, parse_size, ExecutionArgs, OutputArgs, Target, TimingArgs,
};

#[derive(Args, Debug)]
pub struct StreamArgs {
    #[command(flatten)]
    pub target: Target,
    /// TCP connections (per direction with --bidir).
    #[arg(short = 'P', long, default_value_t = 1, value_name = "N")]
    pub connections: u32,
    /// Worker threads here [default: one per connection, up to 128].
    #[arg(long, value_name = "T")]
    pub threads: Option<u32>,
    /// Worker threads on the agent [default: one per connection, up to 128].
    #[arg(long, value_name = "T")]
    pub server_threads: Option<u32>,
    #[command(flatten)]
    pub timing: TimingArgs,
    /// Time after the measured window, excluded from figures.
    #[arg(long, default_value = "0.5", value_parser = parse_duration_ms, value_name = "SECS")]
    pub cooldown: u64,
    /// Bytes per send()/recv() (suffix K, M: 128K = 131072).
    #[arg(short = 'l', long = "buffer", default_value = "128K", value_parser = parse_size, value_name = "SIZE")]
    pub buffer: u32,
    /// The agent sends, this side receives.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once, N connections each.
    #[arg(long)]
    pub bidir: bool,
    /// TCP congestion control algorithm on both sides (cubic, bbr, reno, ...).
    #[arg(short = 'C', long, value_name = "ALG")]
    pub congestion: Option<String>,
    /// Set TCP_NODELAY on the data connections.
    #[arg(long)]
    pub nodelay: bool,
    /// SO_SNDBUF of the data connections, both sides.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub sndbuf: Option<u32>,
    /// SO_RCVBUF of the data connections, both sides.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub rcvbuf: Option<u32>,
    /// Pace the connections of each direction at BITS per second together (k/M/G: 2.5G),
    /// split evenly (SO_MAX_PACING_RATE, iperf3's --fq-rate); an agent with
    /// --max-bitrate needs it [default: unpaced].
    #[arg(short = 'b', long, value_parser = parse_bits, value_name = "BITS")]
    pub rate: Option<f64>,
    /// Send without copying (io_uring send_zc; --engine uring, --buffer 16K or more).
    #[arg(long)]
    pub zerocopy: bool,
    /// HOST runs `iperf3 -s`, not `sonde serve`: speak iperf3's protocol to it (port 5201
    /// unless -p names another); --warmup is its omit and no cool-down runs. Whole seconds.
    #[arg(long, conflicts_with = "from")]
    pub iperf3: bool,
    #[command(flatten)]
    pub iperf3_auth: super::iperf3_auth::Iperf3AuthArgs,
    #[command(flatten)]
    pub execution: ExecutionArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl StreamArgs {
    /// What to measure: a test against an agent, or against an iperf3 server.
    pub fn plan(&self) -> Result<Plan, SpecError> {
        self.iperf3_auth
            .onto(stream::plan(self.spec(), self.iperf3)?)
    }

    /// The flags as a spec, not yet checked.
    fn spec(&self) -> StreamSpec {
        StreamSpec {
            connections: self.connections,
            client_threads: self.threads,
            server_threads: self.server_threads,
            timing: self.timing.timing(self.cooldown),
            buffer_bytes: self.buffer,
            direction: stream::direction(self.bidir, self.reverse),
            congestion: self.congestion.clone(),
            nodelay: self.nodelay,
            sndbuf_bytes: self.sndbuf,
            rcvbuf_bytes: self.rcvbuf,
            rate_bits_per_s: self.rate,
            zerocopy: self.zerocopy,
            execution: self.execution.execution(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests_specs::parsed;
    use super::super::{Cli, Command, TestCommand};
    use super::*;
    use clap::Parser;
    use sonde_results::{Direction, Engine, TestSpec};
    use sonde_run::build::checked;

    fn spec_of(line: &str) -> Result<StreamSpec, SpecError> {
        let Command::Test(TestCommand::Stream(a)) = parsed(line) else {
            panic!("{line} is a stream command")
        };
        checked(TestSpec::Stream(a.spec())).map(|s| match s {
            TestSpec::Stream(s) => s,
            _ => unreachable!(),
        })
    }

    #[test]
    fn flags_become_a_spec() {
        let s = spec_of("stream h -P 8 --bidir -l 64K --server-cpus 1 --cpus 0-1").unwrap();
        assert_eq!((s.connections, s.direction), (8, Direction::Bidir));
        assert_eq!(s.buffer_bytes, 65536);
        assert_eq!(s.execution.server_cpus, Some(vec![1]));
        assert_eq!(s.execution.client_cpus, Some(vec![0, 1]));
        assert_eq!(s.timing.cooldown_ms, 500);
        assert_eq!(
            spec_of("stream h -R").unwrap().direction,
            Direction::Reverse
        );
        assert_eq!(spec_of("stream h").unwrap().direction, Direction::Forward);
        assert_eq!(spec_of("stream h -P 0").unwrap_err().flag, "--connections");
        assert!(Cli::try_parse_from(["sonde", "stream", "h", "-R", "--bidir"]).is_err());
    }

    #[test]
    fn auto_cpus_are_left_for_the_test_start() {
        let e = spec_of("stream h").unwrap().execution;
        assert!(e.client_cpus_auto && e.client_cpus.is_none());
        assert!(e.server_cpus_auto);
        // An engine this build does not know is a usage error, with the engines it knows.
        let e = Cli::try_parse_from(["sonde", "stream", "h", "--engine", "warp"]).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("--engine") && text.contains("kernel"),
            "{text}"
        );
    }

    #[test]
    fn zerocopy_needs_the_uring_engine() {
        let e = spec_of("stream h --zerocopy --engine kernel").unwrap_err();
        assert_eq!(e.flag, "--zerocopy");
        assert!(e.reason.contains("--engine uring"), "{e}");
        assert!(
            spec_of("stream h --zerocopy --engine uring")
                .unwrap()
                .zerocopy
        );
        // Without --engine, --zerocopy asks for io_uring; the default is otherwise kernel.
        let s = spec_of("stream h --zerocopy").unwrap();
        assert_eq!(s.execution.engine, Engine::Uring);
        assert_eq!(
            spec_of("stream h").unwrap().execution.engine,
            Engine::Kernel
        );
    }

    #[test]
    fn an_engine_stream_lacks_is_named() {
        let e = spec_of("stream h --engine dpdk").unwrap_err();
        assert_eq!(e.flag, "--engine");
        assert!(e.reason.contains("kernel"), "{e}");
    }
}
