//! `sonde ping` and `sonde rpc`: round trips, one in flight (sockperf ping-pong), or many
//! connections × many in flight (msg_gen, neper tcp_rr / tcp_crr).

use super::flags::{parse_poll, PollChoice};
use clap::Args;
use sonde_results::stamps::StampSource;
use sonde_results::{SpecError, Stall, TestSpec};
use sonde_run::build::rr::{self, parse_stall, PingParams, RpcParams, RrParams};
pub use sonde_run::build::rr::{parse_stages, StagesChoice};
use sonde_run::measure::Plan;

use super::flags::{parse_duration_ms, parse_size, ExecutionArgs, OutputArgs, Target, TimingArgs};

/// Ping's or rpc's specs, or the flag they refuse.
type Specs = Result<Vec<TestSpec>, SpecError>;

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
    /// Split round trips into stages from both ends' kernel timestamps (send stack, qdisc,
    /// outside the hosts, the echo's wake-up, turnaround and send, receive wake-up): on by
    /// default for one message in N (16 in a closed loop; a paced run keeps 2,000 split or
    /// all), `all` for every message, `off`, or `N` for one in N.
    #[arg(long, num_args = 0..=1, default_missing_value = "sampled", value_parser = parse_stages, value_name = "WHICH")]
    pub stages: Option<StagesChoice>,
    /// Which timestamps the stages ask for: software (the kernel's, the default),
    /// hardware (the NICs' own at both ends, or the test is refused naming the device;
    /// the agent must allow it: serve --allow hwstamps), or auto (hardware at an end that
    /// allows and has it, software elsewhere). Each end's choice and why are in its
    /// side's `stamps`.
    #[arg(long, value_parser = super::flags::named(StampSource::ALL, StampSource::name), default_value = "software", value_name = "WHICH")]
    pub stamps: StampSource,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Test only: the agent stalls once, AFTER_MS into the test, for STALL_MS.
    #[arg(long, hide = true, value_parser = parse_stall, value_name = "AFTER_MS:STALL_MS")]
    pub server_stall: Option<Stall>,
    /// Test only: the agent's echo tells its clock readings NS off (with --stages).
    #[arg(long, hide = true, value_name = "NS", allow_hyphen_values = true)]
    pub server_clock_shift_ns: Option<i64>,
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
    #[arg(short = 'C', long, default_value_t = 1, value_name = "N")]
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

impl RrCommon {
    /// Ping's or rpc's specs, as the pipeline runs them, with the agent and output
    /// (`cli::Test`).
    pub fn test(&self, specs: Specs) -> (Result<Plan, SpecError>, &Target, &OutputArgs) {
        (specs.map(Plan::Tests), &self.target, &self.output)
    }

    /// The shared flags as typed values.
    fn params(&self, udp: bool) -> RrParams {
        RrParams {
            udp,
            timing: self.timing.timing(0),
            modes: self.poll.modes(),
            busy_poll_us: self.busy_poll_us,
            sqpoll: self.sqpoll,
            execution: self.execution.execution(),
            self_noise_ms: self.self_noise,
            stages: self.stages,
            stamps: self.stamps,
            server_stall: self.server_stall,
            server_clock_shift_ns: self.server_clock_shift_ns,
        }
    }
}

impl PingArgs {
    pub fn specs(&self) -> Specs {
        let own = PingParams {
            msg_size: self.msg_size,
            rate: self.rate,
        };
        rr::ping(&self.common.params(self.udp), &own)
    }
}

impl RpcArgs {
    pub fn specs(&self) -> Specs {
        let own = RpcParams {
            connections: self.connections,
            window: self.window,
            msg_size: self.msg_size,
            req_size: self.req_size,
            resp_size: self.resp_size,
            threads: self.threads,
            server_threads: self.server_threads,
            rate: self.rate,
            crr: self.crr,
        };
        rr::rpc(&self.common.params(self.udp), &own)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests_specs::parsed;
    use super::super::{Cli, Command, TestCommand};
    use super::*;
    use clap::Parser;
    use sonde_results::{PollMode, RrSpec, Transport};

    /// The specs of a ping or rpc command line, or the flag refused.
    fn specs_of(line: &str) -> Result<Vec<RrSpec>, SpecError> {
        let specs = match parsed(line) {
            Command::Test(TestCommand::Ping(a)) => a.specs(),
            Command::Test(TestCommand::Rpc(a)) => a.specs(),
            _ => panic!("{line} is ping or rpc"),
        };
        let rr = |s| match s {
            TestSpec::Ping(r) | TestSpec::Rpc(r) => r,
            _ => unreachable!(),
        };
        specs.map(|s| s.into_iter().map(rr).collect())
    }

    #[test]
    fn ping_and_rpc_flags_become_specs() {
        let line = "rpc h -C 8 -W 32 --rate 1000 --poll hybrid=100us --udp";
        let r = &specs_of(line).unwrap()[0];
        assert_eq!(r.poll, PollMode::Hybrid { spin_us: 100 });
        assert_eq!((r.connections, r.window, r.open_loop), (8, 32, true));
        assert_eq!((r.rate_per_s, r.transport), (Some(1000.0), Transport::Udp));
        let r = &specs_of("rpc h -m 1024").unwrap()[0];
        assert_eq!((r.request_bytes, r.response_bytes), (1024, 1024));
        let r = &specs_of("rpc h --req-size 100").unwrap()[0];
        assert_eq!((r.request_bytes, r.response_bytes), (100, 64));
        assert!(Cli::try_parse_from(["sonde", "rpc", "h", "-m", "1", "--req-size", "2"]).is_err());
        let p = specs_of("ping h --udp --poll all -m 32").unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!((p[1].transport, p[1].request_bytes), (Transport::Udp, 32));
        assert_eq!(p[1].poll, PollMode::Busy);
        assert_eq!(specs_of("rpc h -W 0").unwrap_err().flag, "--window");
        assert_eq!(
            specs_of("ping h --udp -m 4").unwrap_err().flag,
            "--msg-size"
        );
    }

    #[test]
    fn xdp_implies_udp() {
        // msg_gen's job: 1 KiB both ways, over AF_XDP (UDP implied).
        let x = &specs_of("rpc h --engine xdp -C 4 -W 32 -m 1024").unwrap()[0];
        assert_eq!(x.transport, Transport::Udp);
        assert_eq!(
            (x.request_bytes, x.response_bytes, x.window),
            (1024, 1024, 32)
        );
        let e = specs_of("rpc h --engine xdp -C 4 -W 32 -m 1024 --crr").unwrap_err();
        assert_eq!(e.flag, "--crr");
    }

    #[test]
    fn self_noise_is_the_kernel_loops_and_reaches_every_spec() {
        let p = specs_of("ping h --self-noise=0.5 --poll all").unwrap();
        assert!(p.iter().all(|s| s.self_noise_ms == Some(500)));
        let e = specs_of("ping h --self-noise=0.5 --engine xdp").unwrap_err();
        assert_eq!(e.flag, "--self-noise");
        assert!(e.to_string().contains("--engine xdp"), "{e}");
    }
}
