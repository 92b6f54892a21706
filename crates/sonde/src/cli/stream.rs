//! `sonde stream`: TCP bulk throughput over many connections (the ntttcp / iperf3 job).

use clap::Args;
use sonde_results::{SpecError, TestSpec};
use sonde_run::build::stream::StreamOptions;

use super::flags::{
    parse_bits, parse_duration_ms, parse_size, ExecutionArgs, OutputArgs, Target, TimingArgs,
};

#[derive(Args, Debug)]
pub struct StreamArgs {
    #[command(flatten)]
    pub target: Target,
    /// TCP connections (per direction with --bidir).
    #[arg(
        short = 'P',
        long = "connections",
        default_value_t = 1,
        value_name = "N"
    )]
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
    #[command(flatten)]
    pub execution: ExecutionArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl StreamArgs {
    pub fn spec(&self) -> Result<TestSpec, SpecError> {
        self.options().spec()
    }

    /// The flags as the run layer's builder reads them.
    fn options(&self) -> StreamOptions {
        StreamOptions {
            connections: self.connections,
            threads: self.threads,
            server_threads: self.server_threads,
            timing: self.timing.timing(self.cooldown),
            buffer: self.buffer,
            reverse: self.reverse,
            bidir: self.bidir,
            congestion: self.congestion.clone(),
            nodelay: self.nodelay,
            sndbuf: self.sndbuf,
            rcvbuf: self.rcvbuf,
            rate: self.rate,
            zerocopy: self.zerocopy,
            execution: self.execution.execution(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use clap::Parser;

    #[test]
    fn flags_become_the_builders_options() {
        let cli = Cli::try_parse_from([
            "sonde",
            "stream",
            "h",
            "-P",
            "8",
            "--bidir",
            "-l",
            "64K",
            "--server-cpus",
            "1",
            "--cpus",
            "0-1",
        ])
        .unwrap();
        let Command::Stream(a) = cli.command else {
            panic!("a stream command")
        };
        let o = a.options();
        assert_eq!((o.connections, o.bidir, o.buffer), (8, true, 65536));
        assert_eq!(o.execution.server_cpus, Some(vec![1]));
        assert_eq!(o.execution.client_cpus, Some(vec![0, 1]));
        assert_eq!(o.timing.cooldown_ms, 500);
        assert!(Cli::try_parse_from(["sonde", "stream", "h", "-R", "--bidir"]).is_err());
    }

    #[test]
    fn auto_cpus_are_left_for_the_test_start() {
        let cli = Cli::try_parse_from(["sonde", "stream", "h"]).unwrap();
        let Command::Stream(a) = cli.command else {
            panic!("a stream command")
        };
        let e = a.options().execution;
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
}
