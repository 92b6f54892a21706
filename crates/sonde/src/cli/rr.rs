//! `sonde ping` and `sonde rpc`: round trips, one in flight (sockperf ping-pong), or many
//! connections × many in flight (msg_gen, neper tcp_rr / tcp_crr).

use clap::Args;
use sonde_results::{SpecError, Stall, TestSpec};
use sonde_run::build::poll::{parse_poll, PollChoice};
use sonde_run::build::rr::{PingOptions, RpcOptions, RrOptions};

use super::flags::{parse_duration_ms, parse_size, ExecutionArgs, OutputArgs, Target, TimingArgs};

/// Flags shared by ping and rpc.
#[derive(Args, Debug)]
pub struct RrCommon {
    #[command(flatten)]
    pub target: Target,
    #[command(flatten)]
    pub timing: TimingArgs,
    /// Receive mode on both sides: block, busy, hybrid[=SPIN] (spin after the last message,
    /// then block; default 50us), or all (each in turn, then a comparison table).
    #[arg(long, default_value = "block", value_parser = parse_poll, value_name = "MODE")]
    pub poll: PollChoice,
    /// SO_BUSY_POLL (and SO_PREFER_BUSY_POLL) on the data sockets, microseconds.
    #[arg(long, value_name = "US")]
    pub busy_poll_us: Option<u32>,
    /// io_uring: a kernel thread polls each ring's submissions (IORING_SETUP_SQPOLL); needs a spare CPU.
    #[arg(long)]
    pub sqpoll: bool,
    #[command(flatten)]
    pub execution: ExecutionArgs,
    /// First measure the tool's own floor for SECS (default 1): this loop against an echo in
    /// this process over a Unix socket pair, no network (--self-noise=SECS).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "1", value_parser = parse_duration_ms, value_name = "SECS")]
    pub self_noise: Option<u64>,
    /// Split each round trip into stages from both ends' kernel timestamps (send stack,
    /// qdisc, outside the hosts, the echo's wake-up, turnaround and send, receive wake-up).
    #[arg(long)]
    pub stages: bool,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Test only: the agent stalls once, AFTER_MS into the test, for STALL_MS.
    #[arg(long, hide = true, value_parser = parse_stall, value_name = "AFTER_MS:STALL_MS")]
    pub server_stall: Option<Stall>,
}

#[derive(Args, Debug)]
pub struct PingArgs {
    #[command(flatten)]
    pub common: RrCommon,
    /// Use UDP instead of TCP (implied by --engine xdp).
    #[arg(long)]
    pub udp: bool,
    /// Message size in bytes, both ways.
    #[arg(short = 'm', long = "msg-size", default_value = "64", value_parser = parse_size, value_name = "BYTES")]
    pub msg_size: u32,
    /// Messages per second (each timed from its actual send); default: as fast as possible.
    #[arg(long, value_name = "N")]
    pub rate: Option<f64>,
    /// One run per idle state of this host (cpuidle), each with the CPU latency limit at
    /// that state's exit latency (so it is the deepest allowed), then a table of latency
    /// and CPU per message by deepest allowed state.
    #[arg(long, conflicts_with = "cpu_latency_us")]
    pub cstate_sweep: bool,
}

#[derive(Args, Debug)]
pub struct RpcArgs {
    #[command(flatten)]
    pub common: RrCommon,
    /// Connections (TCP), or flows (UDP: a source port each).
    #[arg(
        short = 'C',
        long = "connections",
        default_value_t = 1,
        value_name = "N"
    )]
    pub connections: u32,
    /// Requests in flight per connection (msg_gen's msg_window).
    #[arg(short = 'W', long, default_value_t = 1, value_name = "N")]
    pub window: u32,
    /// Use UDP instead of TCP: a flow per connection, requests matched to their answers by
    /// sequence number (implied by --engine xdp).
    #[arg(long)]
    pub udp: bool,
    /// Request and response size in bytes (msg_gen's -m 1024).
    #[arg(short = 'm', long = "msg-size", value_parser = parse_size, value_name = "BYTES",
          conflicts_with_all = ["req_size", "resp_size"])]
    pub msg_size: Option<u32>,
    #[arg(long, default_value = "64", value_parser = parse_size, value_name = "BYTES")]
    pub req_size: u32,
    #[arg(long, default_value = "64", value_parser = parse_size, value_name = "BYTES")]
    pub resp_size: u32,
    /// Worker threads here, each multiplexing its connections with epoll [default: one per
    /// two usable CPUs, at most one per connection].
    #[arg(long, value_name = "T")]
    pub threads: Option<u32>,
    /// Worker threads on the agent [default: one per two of its usable CPUs, at most one per
    /// connection].
    #[arg(long, value_name = "T")]
    pub server_threads: Option<u32>,
    /// Open loop: R requests per second in total on a fixed schedule, latency measured from
    /// each request's intended send time. Default: closed loop.
    #[arg(long, value_name = "R")]
    pub rate: Option<f64>,
    /// A new connection per request (neper tcp_crr).
    #[arg(long)]
    pub crr: bool,
}

fn parse_stall(s: &str) -> Result<Stall, String> {
    let (a, b) = s.split_once(':').ok_or("expected AFTER_MS:STALL_MS")?;
    Ok(Stall {
        after_ms: a.parse().map_err(|_| "AFTER_MS is not a number")?,
        stall_ms: b.parse().map_err(|_| "STALL_MS is not a number")?,
    })
}

impl RrCommon {
    /// The shared flags as the run layer's builder reads them.
    fn options(&self, udp: bool) -> RrOptions {
        RrOptions {
            timing: self.timing.timing(0),
            poll: self.poll.clone(),
            busy_poll_us: self.busy_poll_us,
            sqpoll: self.sqpoll,
            execution: self.execution.execution(),
            server_stall: self.server_stall,
            udp,
            self_noise_ms: self.self_noise,
            stages: self.stages,
        }
    }
}

impl PingArgs {
    pub fn specs(&self) -> Result<Vec<TestSpec>, SpecError> {
        self.options().specs()
    }

    fn options(&self) -> PingOptions {
        PingOptions {
            common: self.common.options(self.udp),
            msg_size: self.msg_size,
            rate: self.rate,
        }
    }
}

impl RpcArgs {
    pub fn specs(&self) -> Result<Vec<TestSpec>, SpecError> {
        self.options().specs()
    }

    fn options(&self) -> RpcOptions {
        RpcOptions {
            common: self.common.options(self.udp),
            connections: self.connections,
            window: self.window,
            msg_size: self.msg_size,
            req_size: self.req_size,
            resp_size: self.resp_size,
            threads: self.threads,
            server_threads: self.server_threads,
            rate: self.rate,
            crr: self.crr,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use super::*;
    use clap::Parser;
    use sonde_results::PollMode;

    fn rpc_options(args: &[&str]) -> RpcOptions {
        match Cli::try_parse_from(args).unwrap().command {
            Command::Rpc(a) => a.options(),
            _ => panic!("{args:?} is rpc"),
        }
    }

    #[test]
    fn rpc_flags_become_the_builders_options() {
        let o = rpc_options(&[
            "sonde",
            "rpc",
            "h",
            "-C",
            "8",
            "-W",
            "32",
            "--rate",
            "1000",
            "--poll",
            "hybrid=100us",
            "--udp",
        ]);
        assert_eq!(
            o.common.poll,
            PollChoice::One(PollMode::Hybrid { spin_us: 100 })
        );
        assert_eq!((o.connections, o.window, o.rate), (8, 32, Some(1000.0)));
        assert!(o.common.udp);
        let o = rpc_options(&["sonde", "rpc", "h", "-m", "1024"]);
        assert_eq!((o.msg_size, o.req_size), (Some(1024), 64));
        assert!(Cli::try_parse_from(["sonde", "rpc", "h", "-m", "1", "--req-size", "2"]).is_err());
    }
}
