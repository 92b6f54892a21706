//! `sonde pps`: small-packet UDP rate over many flows, loss accounting, and the RFC 2544
//! zero-loss search (testpmd txonly/rxonly).

use clap::Args;
use sonde_results::{DpdkSpec, Engine, PollMode, PpsSpec, SpecError, TestSpec};
use sonde_run::measure::Plan;
use sonde_run::search::SearchParams;

use super::flags::{checked, parse_duration_ms, ExecutionArgs, OutputArgs, Target, TimingArgs};
use super::rr::{parse_poll, PollChoice};

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
    /// --engine dpdk: extra arguments for both sides' testpmd, EAL ones first, then after
    /// a `--` testpmd's own (they come after sonde's, so they override them), e.g.
    /// "--no-huge -- --mbcache=512".
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub dpdk_args: Option<String>,
}

impl DpdkArgs {
    /// The spec's DPDK part for `--engine dpdk`; any of these flags without it is refused.
    fn spec(&self, engine: Engine) -> Result<Option<Box<DpdkSpec>>, SpecError> {
        let given = [
            ("--dpdk-dev", self.dpdk_dev.is_some()),
            ("--server-dpdk-dev", self.server_dpdk_dev.is_some()),
            ("--tx-queues", self.tx_queues.is_some()),
            ("--rx-queues", self.rx_queues.is_some()),
            ("--dpdk-args", self.dpdk_args.is_some()),
        ];
        if engine != Engine::Dpdk {
            return match given.iter().find(|g| g.1) {
                Some((flag, _)) => Err(SpecError {
                    flag,
                    reason: format!("is for --engine dpdk (this test runs --engine {engine})"),
                }),
                None => Ok(None),
            };
        }
        for (flag, dev) in [
            ("--dpdk-dev", &self.dpdk_dev),
            ("--server-dpdk-dev", &self.server_dpdk_dev),
        ] {
            if let Some(d) = dev {
                sonde_engine::dpdk::Device::parse(d)
                    .map_err(|reason| SpecError { flag, reason })?;
            }
        }
        let words = match &self.dpdk_args {
            Some(a) => shell_words::split(a).map_err(|e| SpecError {
                flag: "--dpdk-args",
                reason: format!("{a:?}: {e}"),
            })?,
            None => Vec::new(),
        };
        let (eal_args, testpmd_args) = DpdkSpec::split_args(&words);
        Ok(Some(Box::new(DpdkSpec {
            client_device: self.dpdk_dev.clone(),
            server_device: self.server_dpdk_dev.clone(),
            tx_queues: self.tx_queues.unwrap_or(0),
            rx_queues: self.rx_queues.unwrap_or(0),
            descriptors: self.descriptors,
            eal_args,
            testpmd_args,
        })))
    }
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

impl SearchArgs {
    fn check(&self) -> Result<(), SpecError> {
        let refuse = |flag, reason| Err(SpecError { flag, reason });
        if !(0.0..100.0).contains(&self.max_loss) {
            let why = format!("{} is not a percentage in [0, 100)", self.max_loss);
            return refuse("--max-loss", why);
        }
        if !(self.resolution > 0.0 && self.resolution < 50.0) {
            let why = format!("{} is not a percentage in (0, 50)", self.resolution);
            return refuse("--resolution", why);
        }
        Ok(())
    }
}

impl PpsArgs {
    /// One test, or with `--search` the zero-loss search made of such tests.
    pub fn plan(&self) -> Result<Plan, SpecError> {
        let spec = self.spec()?;
        Ok(match self.search.search {
            true => Plan::Search(
                spec,
                SearchParams {
                    max_loss_percent: self.search.max_loss,
                    resolution_percent: self.search.resolution,
                    trials_per_step: self.search.trials_per_step,
                },
            ),
            false => Plan::Tests(vec![TestSpec::Pps(spec)]),
        })
    }

    pub fn spec(&self) -> Result<PpsSpec, SpecError> {
        let PollChoice::One(poll) = self.poll else {
            return Err(SpecError {
                flag: "--poll",
                reason: "'all' is for ping and rpc; pick one mode".into(),
            });
        };
        self.search.check()?;
        let execution = self.execution.execution();
        let dpdk = self.dpdk.spec(execution.engine)?;
        // testpmd's main lcore takes a CPU of its own: its forwarding lcores get the rest.
        let tx_default = dpdk.as_ref().map(|_| {
            let cpus = sonde_engine::usable_cpus() as u32;
            cpus.saturating_sub(1)
                .clamp(1, self.flows.unwrap_or(u32::MAX).max(1))
        });
        let (tx_threads, flows) = sonde_engine::pps_threads(
            self.tx_threads.or(tx_default),
            self.rx_threads,
            self.flows,
            self.gso,
        );
        let mut timing = self.timing.timing(0);
        if self.search.search {
            timing.duration_ms = self.search.trial;
        }
        let spec = PpsSpec {
            size_bytes: self.size,
            tx_threads,
            rx_threads: self.rx_threads,
            flows,
            batch: self.batch,
            gso: self.gso,
            rate_pps: self.rate,
            timing,
            // testpmd's forwarding lcores always poll.
            poll: if dpdk.is_some() { PollMode::Busy } else { poll },
            execution,
            ipv6: self.target.host().contains(':'),
            dpdk,
        };
        checked(TestSpec::Pps(spec.clone()))?;
        if spec.tx_threads > spec.flows {
            return Err(SpecError {
                flag: "--tx-threads",
                reason: format!(
                    "{} threads for {} flows: each thread needs a flow",
                    spec.tx_threads, spec.flows
                ),
            });
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use super::*;
    use clap::Parser;

    fn spec_of(args: &[&str]) -> Result<PpsSpec, SpecError> {
        let Command::Pps(a) = Cli::try_parse_from(args).unwrap().command else {
            panic!("{args:?} is a pps command")
        };
        a.spec()
    }

    #[test]
    fn flags_become_a_spec() {
        let s = spec_of(&[
            "sonde", "pps", "h", "--flows", "4", "--search", "--trial", "2",
        ]);
        let s = s.unwrap();
        assert_eq!((s.flows, s.timing.duration_ms), (4, 2000));
        let refused = [
            (&["sonde", "pps", "h", "--poll", "all"][..], "--poll"),
            (&["sonde", "pps", "h", "--max-loss", "100"], "--max-loss"),
            (&["sonde", "pps", "h", "--resolution", "0"], "--resolution"),
            (
                &["sonde", "pps", "h", "--tx-threads", "4", "--flows", "2"],
                "--tx-threads",
            ),
            (&["sonde", "pps", "h", "--size", "20"], "--size"),
        ];
        for (args, flag) in refused {
            assert_eq!(spec_of(args).unwrap_err().flag, flag, "{args:?}");
        }
    }

    #[test]
    fn dpdk_flags_become_the_spec_dpdk_part() {
        let s = spec_of(&[
            "sonde",
            "pps",
            "h",
            "--engine",
            "dpdk",
            "--dpdk-dev",
            "--vdev=7870:00:00.0,mac=7c:1e:52:0f:c6:95",
            "--tx-queues",
            "4",
            "--rx-queues",
            "8",
            "--dpdk-args",
            "--no-huge -m 512 -- --mbcache=512",
        ])
        .unwrap();
        let d = s.dpdk.as_deref().unwrap();
        assert_eq!((d.tx_queues, d.rx_queues, d.descriptors), (4, 8, 2048));
        assert_eq!(d.eal_args, ["--no-huge", "-m", "512"]);
        assert_eq!(d.testpmd_args, ["--mbcache=512"]);
        assert!(d.without_hugepages());
        assert_eq!(s.poll, PollMode::Busy, "testpmd polls");
        let refused = [
            (
                &["sonde", "pps", "h", "--dpdk-dev", "0000:3b:00.0"][..],
                "--dpdk-dev",
            ),
            (
                &[
                    "sonde",
                    "pps",
                    "h",
                    "--engine",
                    "dpdk",
                    "--dpdk-dev",
                    "eth0",
                ],
                "--dpdk-dev",
            ),
            (
                &[
                    "sonde",
                    "pps",
                    "h",
                    "--engine",
                    "dpdk",
                    "--dpdk-args",
                    "'open",
                ],
                "--dpdk-args",
            ),
            (&["sonde", "pps", "h", "--engine", "dpdk", "--gso"], "--gso"),
            (
                &[
                    "sonde",
                    "pps",
                    "h",
                    "--engine",
                    "dpdk",
                    "--descriptors",
                    "8",
                ],
                "--descriptors",
            ),
        ];
        for (args, flag) in refused {
            assert_eq!(spec_of(args).unwrap_err().flag, flag, "{args:?}");
        }
    }
}
