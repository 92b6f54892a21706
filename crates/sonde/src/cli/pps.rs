//! `sonde pps`: small-packet UDP rate over many flows, loss accounting, and the RFC 2544
//! zero-loss search (testpmd txonly/rxonly).

use super::flags::{parse_poll, PollChoice};
use clap::Args;
use sonde_results::SpecError;
use sonde_run::build::pps::{self, DpdkFlags, PpsParams, SearchFlags};
use sonde_run::measure::Plan;

use super::flags::{parse_duration_ms, ExecutionArgs, OutputArgs, Target, TimingArgs};

#[derive(Args, Debug)]
pub struct PpsArgs {
    #[command(flatten)]
    pub target: Target,
    /// Bytes per packet on the wire: Ethernet + IPv4 + UDP headers + payload, no FCS (as testpmd).
    #[arg(long, default_value_t = 64, value_name = "BYTES")]
    pub size: u32,
    /// Sending threads here [default: one per usable CPU, at most one per flow asked for;
    /// one with --gso; with --engine xdp at most one per transmit queue of the interface].
    #[arg(long, value_name = "T")]
    pub tx_threads: Option<u32>,
    /// Receiving threads on the agent, one SO_REUSEPORT socket each (with --engine xdp: one
    /// AF_XDP socket and thread per receive queue of the interface, whatever is asked).
    #[arg(long, default_value_t = 1, value_name = "T")]
    pub rx_threads: u32,
    /// Flows: each its own source port, so RSS and SO_REUSEPORT spread the load
    /// [default: one per sending or receiving thread, whichever are more].
    #[arg(long, value_name = "N")]
    pub flows: Option<u32>,
    /// Packets per sendmmsg/recvmmsg call (with --engine xdp: per ring operation).
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub batch: u32,
    /// UDP GSO on the sender: one send per batch, cut into packets by the kernel late in
    /// the output path (as a NIC's segmentation offload would). Batch at most 64.
    #[arg(long)]
    pub gso: bool,
    /// Offered packets per second over all senders; default: as fast as possible.
    #[arg(long, value_name = "PPS")]
    pub rate: Option<f64>,
    #[command(flatten)]
    pub timing: TimingArgs,
    /// Receive mode of the agent's receivers: block, busy, hybrid[=SPIN]. block sleeps: in
    /// the socket when packets are few, a 100 us nap between batches when they come fast.
    #[arg(long, default_value = "block", value_parser = parse_poll, value_name = "MODE")]
    pub poll: PollChoice,
    #[command(flatten)]
    pub execution: ExecutionArgs,
    #[command(flatten)]
    pub search: SearchArgs,
    #[command(flatten)]
    pub dpdk: DpdkArgs,
    /// HOST runs `iperf3 -s`, not `sonde serve`: its UDP test (-u), one iperf3 stream a
    /// flow, --size less the headers its -l, --rate its -b (port 5201 unless -p names
    /// another). Whole seconds.
    #[arg(long, conflicts_with_all = ["from", "search"])]
    pub iperf3: bool,
    /// With --iperf3: reverse, the iperf3 server sends (iperf3's -R) and this side
    /// receives and counts, iperf3's way (lost, out of order, jitter) and its own.
    #[arg(short = 'R', long, requires = "iperf3")]
    pub reverse: bool,
    /// With --iperf3: both ends send at once (iperf3's --bidir), each at --rate on its own
    /// --flows; this side counts the server's as under -R.
    #[arg(long, requires = "iperf3", conflicts_with = "reverse")]
    pub bidir: bool,
    #[command(flatten)]
    pub iperf3_auth: super::iperf3_auth::Iperf3AuthArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `--engine dpdk`: what each side's dpdk-testpmd runs on.
#[derive(Args, Debug)]
pub struct DpdkArgs {
    /// --engine dpdk: this host's device: a PCI address bound to vfio-pci or a bifurcated
    /// driver (0000:3b:00.0), or a virtual device (net_af_packet0,iface=eth1;
    /// --vdev=<bus>,mac=<MAC> for MANA, as `sonde host` prints it) [default: the device
    /// behind the interface carrying the test; MANA's vdev form, `vdev:<bus>,mac=<MAC>`].
    #[arg(long, value_name = "DEV", allow_hyphen_values = true)]
    pub dpdk_dev: Option<String>,
    /// --engine dpdk: the agent's device, as --dpdk-dev [default: chosen by the agent the
    /// same way].
    #[arg(long, value_name = "DEV", allow_hyphen_values = true)]
    pub server_dpdk_dev: Option<String>,
    /// --engine dpdk: queues of the sender's port [default: one per forwarding lcore].
    #[arg(long, value_name = "N")]
    pub tx_queues: Option<u32>,
    /// --engine dpdk: queues of the receiver's port [default: one per forwarding lcore].
    #[arg(long, value_name = "N")]
    pub rx_queues: Option<u32>,
    /// --engine dpdk: descriptors per queue (testpmd's --rxd/--txd).
    #[arg(long, default_value_t = sonde_results::spec::DPDK_DESCRIPTORS, value_name = "N")]
    pub descriptors: u32,
    /// --engine dpdk: extra arguments for this host's testpmd (the client side's: the
    /// `--from` agent's in a test between two agents), EAL ones first, then after a `--`
    /// testpmd's own (they come after sonde's, so they override them), e.g.
    /// "--no-huge --no-pci -- --mbcache=512".
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub dpdk_args: Option<String>,
    /// --engine dpdk: extra arguments for the agent's testpmd, as --dpdk-args; an agent
    /// takes only --no-huge, -m, --socket-mem, and testpmd's --mbcache, --rxd, --txd,
    /// --burst from a controller [default: none].
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub server_dpdk_args: Option<String>,
}

/// The RFC 2544 throughput search.
#[derive(Args, Debug)]
pub struct SearchArgs {
    /// RFC 2544 throughput search: the highest rate whose loss is at most --max-loss.
    #[arg(long)]
    pub search: bool,
    /// Length of each search trial.
    #[arg(long, default_value = "5", value_parser = parse_duration_ms, value_name = "SECS")]
    pub trial: u64,
    /// Largest loss a search trial may have and pass, percent.
    #[arg(long, default_value_t = 0.0, value_name = "PERCENT")]
    pub max_loss: f64,
    /// Search precision: stop when the bounds are this close, percent of the upper one.
    #[arg(long, default_value_t = 1.0, value_name = "PERCENT")]
    pub resolution: f64,
    /// Search: trials at each rate; the rate passes only if every one does.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10))]
    pub trials_per_step: u32,
}

impl PpsArgs {
    /// One test, the zero-loss search made of such tests, or a test against `iperf3 -s`.
    pub fn plan(&self) -> Result<Plan, SpecError> {
        self.iperf3_auth.onto(pps::plan(&self.params())?)
    }

    fn params(&self) -> PpsParams {
        let (s, d) = (&self.search, &self.dpdk);
        PpsParams {
            size: self.size,
            tx_threads: self.tx_threads,
            rx_threads: self.rx_threads,
            flows: self.flows,
            batch: self.batch,
            gso: self.gso,
            rate: self.rate,
            timing: self.timing.timing(0),
            poll: self.poll.one(),
            execution: self.execution.execution(),
            ipv6: self.target.host().contains(':'),
            reverse: self.reverse,
            bidir: self.bidir,
            iperf3: self.iperf3,
            search: SearchFlags {
                search: s.search,
                trial_ms: s.trial,
                max_loss: s.max_loss,
                resolution: s.resolution,
                trials_per_step: s.trials_per_step,
            },
            dpdk: DpdkFlags {
                dpdk_dev: d.dpdk_dev.clone(),
                server_dpdk_dev: d.server_dpdk_dev.clone(),
                tx_queues: d.tx_queues,
                rx_queues: d.rx_queues,
                descriptors: d.descriptors,
                dpdk_args: d.dpdk_args.clone(),
                server_dpdk_args: d.server_dpdk_args.clone(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests_specs::parsed;
    use super::super::{Command, TestCommand};
    use super::*;
    use sonde_results::{PollMode, PpsSpec, Role};

    fn args_of(line: &str) -> PpsArgs {
        let Command::Test(TestCommand::Pps(a)) = parsed(line) else {
            panic!("{line} is a pps command")
        };
        a
    }

    fn spec_of(line: &str) -> Result<PpsSpec, SpecError> {
        pps::spec(&args_of(line).params())
    }

    #[test]
    fn flags_become_a_spec() {
        let line = "pps h --flows 4 --search --trial 2";
        let s = spec_of(line).unwrap();
        assert_eq!((s.flows, s.timing.duration_ms), (4, 2000));
        assert!(!s.ipv6);
        assert!(matches!(args_of(line).plan().unwrap(), Plan::Search(..)));
        assert!(spec_of("pps ::1 --size 128").unwrap().ipv6);
        let refused = [
            ("pps h --poll all", "--poll"),
            ("pps h --search --max-loss 100", "--max-loss"),
            ("pps h --search --resolution 0", "--resolution"),
            ("pps h --tx-threads 4 --flows 2", "--tx-threads"),
            ("pps h --size 20", "--size"),
        ];
        for (line, flag) in refused {
            assert_eq!(spec_of(line).unwrap_err().flag, flag, "{line}");
        }
    }

    #[test]
    fn reverse_is_an_iperf3_tests_only() {
        assert!(spec_of("pps h --iperf3 -R").unwrap().reverse);
        assert!(!spec_of("pps h --iperf3").unwrap().reverse);
        // Against an agent, -R and --bidir are refused at parsing, naming --iperf3.
        for flag in ["-R", "--bidir"] {
            let words = ["sonde", "pps", "h", flag];
            let e = <super::super::Cli as clap::Parser>::try_parse_from(words).unwrap_err();
            assert!(e.to_string().contains("--iperf3"), "{flag}: {e}");
        }
        let Ok(Plan::Iperf3(sonde_results::TestSpec::Pps(s), _)) =
            args_of("pps h --iperf3 --bidir").plan()
        else {
            panic!("an iperf3 test")
        };
        assert!(s.bidir && !s.reverse);
    }

    #[test]
    fn dpdk_flags_become_the_spec_dpdk_part() {
        let dev = "--dpdk-dev=--vdev=7870:00:00.0,mac=7c:1e:52:0f:c6:95";
        let line = format!(
            "pps h --engine dpdk {dev} --tx-queues 4 --rx-queues 8 \
             --dpdk-args '--no-huge -m 512 --no-pci -- --mbcache=512' \
             --server-dpdk-args '--no-huge -- --burst=64'"
        );
        let s = spec_of(&line).unwrap();
        let d = s.dpdk.as_deref().unwrap();
        assert_eq!((d.tx_queues, d.rx_queues, d.descriptors), (4, 8, 2048));
        // Each side its own: this host's switches are not the agent's.
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let client = (
            words(&["--no-huge", "-m", "512", "--no-pci"]),
            words(&["--mbcache=512"]),
        );
        let server = (words(&["--no-huge"]), words(&["--burst=64"]));
        assert_eq!(d.args(Role::Client), (&client.0[..], &client.1[..]));
        assert_eq!(d.args(Role::Server), (&server.0[..], &server.1[..]));
        assert!(d.without_hugepages(Role::Client) && d.without_hugepages(Role::Server));
        assert_eq!(s.poll, PollMode::Busy, "testpmd polls");
        let d = spec_of("pps h --engine dpdk --dpdk-args --no-huge")
            .unwrap()
            .dpdk
            .unwrap();
        assert_eq!(
            d.args(Role::Server),
            (&[][..], &[][..]),
            "nothing unless asked"
        );
        assert!(!d.without_hugepages(Role::Server));
        let e = spec_of("pps h --dpdk-dev 0000:3b:00.0").unwrap_err();
        assert_eq!(e.flag, "--dpdk-dev");
        let refused = [
            ("--dpdk-dev eth0", "--dpdk-dev"),
            ("--dpdk-args \"'open\"", "--dpdk-args"),
            ("--server-dpdk-args \"'open\"", "--server-dpdk-args"),
            ("--gso", "--gso"),
            ("--descriptors 8", "--descriptors"),
        ];
        for (flags, flag) in refused {
            let line = format!("pps h --engine dpdk {flags}");
            assert_eq!(spec_of(&line).unwrap_err().flag, flag, "{line}");
        }
    }
}
