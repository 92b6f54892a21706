//! `pps`: its options into a spec, with the defaults chosen from this host (sending
//! threads; with DPDK, testpmd's forwarding lcores), the DPDK part and the zero-loss
//! search's checks.

use sonde_results::{DpdkSpec, Engine, Execution, PollMode, PpsSpec, SpecError, TestSpec, Timing};

use super::check::checked;
use super::poll::PollChoice;
use crate::measure::Plan;
use crate::search::SearchParams;

/// What a pps test was asked for (the CLI's flags, unchecked).
#[derive(Debug, Clone)]
pub struct PpsOptions {
    pub size: u32,
    /// `None`: one per usable CPU, at most one per flow asked for (the engine's choice).
    pub tx_threads: Option<u32>,
    pub rx_threads: u32,
    pub flows: Option<u32>,
    pub batch: u32,
    pub gso: bool,
    pub rate: Option<f64>,
    pub timing: Timing,
    pub poll: PollChoice,
    pub execution: Execution,
    /// The agent is addressed over IPv6.
    pub ipv6: bool,
    pub search: SearchOptions,
    pub dpdk: DpdkOptions,
}

/// The RFC 2544 throughput search.
#[derive(Debug, Clone)]
pub struct SearchOptions {
    /// Search, instead of one test.
    pub on: bool,
    /// Length of each trial; it replaces the test's duration when searching.
    pub trial_ms: u64,
    pub max_loss_percent: f64,
    pub resolution_percent: f64,
    pub trials_per_step: u32,
}

/// `--engine dpdk`: what each side's dpdk-testpmd runs on.
#[derive(Debug, Clone, Default)]
pub struct DpdkOptions {
    pub client_device: Option<String>,
    pub server_device: Option<String>,
    pub tx_queues: Option<u32>,
    pub rx_queues: Option<u32>,
    pub descriptors: u32,
    /// This side's extra testpmd arguments as one shell-quoted string, EAL ones before a
    /// `--` (`--dpdk-args`).
    pub args: Option<String>,
    /// The agent's, as `args` (`--server-dpdk-args`).
    pub server_args: Option<String>,
}

/// A `--dpdk-args`-like flag's words, split at its `--`: EAL's, then testpmd's.
fn split_flag(
    flag: &'static str,
    args: &Option<String>,
) -> Result<(Vec<String>, Vec<String>), SpecError> {
    let words = match args {
        Some(a) => shell_words::split(a).map_err(|e| SpecError {
            flag,
            reason: format!("{a:?}: {e}"),
        })?,
        None => Vec::new(),
    };
    Ok(DpdkSpec::split_args(&words))
}

impl DpdkOptions {
    /// The spec's DPDK part for `--engine dpdk`; any of these options without it is refused.
    fn spec(&self, engine: Engine) -> Result<Option<Box<DpdkSpec>>, SpecError> {
        let given = [
            ("--dpdk-dev", self.client_device.is_some()),
            ("--server-dpdk-dev", self.server_device.is_some()),
            ("--tx-queues", self.tx_queues.is_some()),
            ("--rx-queues", self.rx_queues.is_some()),
            ("--dpdk-args", self.args.is_some()),
            ("--server-dpdk-args", self.server_args.is_some()),
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
            ("--dpdk-dev", &self.client_device),
            ("--server-dpdk-dev", &self.server_device),
        ] {
            if let Some(d) = dev {
                sonde_engine::dpdk::Device::parse(d)
                    .map_err(|reason| SpecError { flag, reason })?;
            }
        }
        let (client_eal_args, client_testpmd_args) = split_flag("--dpdk-args", &self.args)?;
        let (server_eal_args, server_testpmd_args) =
            split_flag("--server-dpdk-args", &self.server_args)?;
        Ok(Some(Box::new(DpdkSpec {
            client_device: self.client_device.clone(),
            server_device: self.server_device.clone(),
            tx_queues: self.tx_queues.unwrap_or(0),
            rx_queues: self.rx_queues.unwrap_or(0),
            descriptors: self.descriptors,
            client_eal_args,
            client_testpmd_args,
            server_eal_args,
            server_testpmd_args,
        })))
    }
}

impl SearchOptions {
    fn check(&self) -> Result<(), SpecError> {
        let refuse = |flag, reason| Err(SpecError { flag, reason });
        if !(0.0..100.0).contains(&self.max_loss_percent) {
            let why = format!("{} is not a percentage in [0, 100)", self.max_loss_percent);
            return refuse("--max-loss", why);
        }
        if !(self.resolution_percent > 0.0 && self.resolution_percent < 50.0) {
            let why = format!("{} is not a percentage in (0, 50)", self.resolution_percent);
            return refuse("--resolution", why);
        }
        Ok(())
    }
}

impl PpsOptions {
    /// One test, or with a search the zero-loss search made of such tests.
    pub fn plan(&self) -> Result<Plan, SpecError> {
        let spec = self.spec()?;
        Ok(match self.search.on {
            true => Plan::Search(
                spec,
                SearchParams {
                    max_loss_percent: self.search.max_loss_percent,
                    resolution_percent: self.search.resolution_percent,
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
        let execution = self.execution.clone();
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
        let mut timing = self.timing.clone();
        if self.search.on {
            timing.duration_ms = self.search.trial_ms;
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
            ipv6: self.ipv6,
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
    use super::*;
    use sonde_results::Role;

    /// A change to the options, and the flag the builder should then name.
    type Refused = (fn(&mut PpsOptions), &'static str);

    /// The options of `sonde pps HOST` with no flags.
    fn options() -> PpsOptions {
        PpsOptions {
            size: 64,
            tx_threads: None,
            rx_threads: 1,
            flows: None,
            batch: 32,
            gso: false,
            rate: None,
            timing: Timing {
                duration_ms: 10_000,
                warmup_ms: 1000,
                cooldown_ms: 0,
                interval_ms: 1000,
            },
            poll: PollChoice::One(PollMode::Block),
            execution: Execution::default(),
            ipv6: false,
            search: SearchOptions {
                on: false,
                trial_ms: 5000,
                max_loss_percent: 0.0,
                resolution_percent: 1.0,
                trials_per_step: 1,
            },
            dpdk: DpdkOptions {
                descriptors: sonde_results::spec::DPDK_DESCRIPTORS,
                ..DpdkOptions::default()
            },
        }
    }

    fn dpdk() -> PpsOptions {
        let mut o = options();
        o.execution.engine = Engine::Dpdk;
        o
    }

    #[test]
    fn options_become_a_spec() {
        let mut o = options();
        o.flows = Some(4);
        o.search.on = true;
        o.search.trial_ms = 2000;
        let s = o.spec().unwrap();
        assert_eq!((s.flows, s.timing.duration_ms), (4, 2000));
        assert!(matches!(o.plan().unwrap(), Plan::Search(..)));
        let refused: [Refused; 5] = [
            (|o| o.poll = PollChoice::All, "--poll"),
            (|o| o.search.max_loss_percent = 100.0, "--max-loss"),
            (|o| o.search.resolution_percent = 0.0, "--resolution"),
            (
                |o| (o.tx_threads, o.flows) = (Some(4), Some(2)),
                "--tx-threads",
            ),
            (|o| o.size = 20, "--size"),
        ];
        for (change, flag) in refused {
            let mut o = options();
            change(&mut o);
            assert_eq!(o.spec().unwrap_err().flag, flag);
        }
    }

    #[test]
    fn dpdk_options_become_the_spec_dpdk_part() {
        let mut o = dpdk();
        o.dpdk.client_device = Some("--vdev=7870:00:00.0,mac=7c:1e:52:0f:c6:95".into());
        (o.dpdk.tx_queues, o.dpdk.rx_queues) = (Some(4), Some(8));
        o.dpdk.args = Some("--no-huge -m 512 --no-pci -- --mbcache=512".into());
        o.dpdk.server_args = Some("--no-huge -- --burst=64".into());
        let s = o.spec().unwrap();
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
        o.dpdk.server_args = None;
        let d = o.spec().unwrap().dpdk.unwrap();
        assert_eq!(
            d.args(Role::Server),
            (&[][..], &[][..]),
            "nothing unless asked"
        );
        assert!(!d.without_hugepages(Role::Server));
        assert_eq!(s.poll, PollMode::Busy, "testpmd polls");
        let mut o = options();
        o.dpdk.client_device = Some("0000:3b:00.0".into());
        assert_eq!(o.spec().unwrap_err().flag, "--dpdk-dev");
        let refused: [Refused; 5] = [
            (|o| o.dpdk.client_device = Some("eth0".into()), "--dpdk-dev"),
            (|o| o.dpdk.args = Some("'open".into()), "--dpdk-args"),
            (
                |o| o.dpdk.server_args = Some("'open".into()),
                "--server-dpdk-args",
            ),
            (|o| o.gso = true, "--gso"),
            (|o| o.dpdk.descriptors = 8, "--descriptors"),
        ];
        for (change, flag) in refused {
            let mut o = dpdk();
            change(&mut o);
            assert_eq!(o.spec().unwrap_err().flag, flag);
        }
    }
}
