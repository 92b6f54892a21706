//! `sonde pps`: its flags' values into a validated spec (the defaults this host chooses,
//! the DPDK part) or the zero-loss search made of such tests; each refusal names its flag.

use sonde_results::{DpdkSpec, Engine, Execution, PollMode, PpsSpec, SpecError, TestSpec, Timing};

use super::checked;
use crate::measure::Plan;
use crate::search::SearchParams;

/// `sonde pps`'s flags, as typed values.
#[derive(Debug, Clone)]
pub struct PpsParams {
    /// `--size`: bytes per packet on the wire.
    pub size: u32,
    pub tx_threads: Option<u32>,
    pub rx_threads: u32,
    pub flows: Option<u32>,
    pub batch: u32,
    pub gso: bool,
    /// `--rate`: packets per second over all senders.
    pub rate: Option<f64>,
    pub timing: Timing,
    /// `--poll`: one receive mode (`None`: `all`, which pps refuses).
    pub poll: Option<PollMode>,
    pub execution: Execution,
    /// The agent's address is IPv6.
    pub ipv6: bool,
    /// `-R`: the far end (an iperf3 server) sends, this side receives.
    pub reverse: bool,
    /// `--bidir`: against an iperf3 server, both send at once.
    pub bidir: bool,
    /// `--iperf3`: the far end runs `iperf3 -s`, not `sonde serve`.
    pub iperf3: bool,
    pub search: SearchFlags,
    pub dpdk: DpdkFlags,
}

/// `--search` and its bounds.
#[derive(Debug, Clone)]
pub struct SearchFlags {
    pub search: bool,
    /// `--trial`: each trial's length, ms.
    pub trial_ms: u64,
    pub max_loss: f64,
    pub resolution: f64,
    pub trials_per_step: u32,
}

/// The `--engine dpdk` flags.
#[derive(Debug, Clone, Default)]
pub struct DpdkFlags {
    pub dpdk_dev: Option<String>,
    pub server_dpdk_dev: Option<String>,
    pub tx_queues: Option<u32>,
    pub rx_queues: Option<u32>,
    pub descriptors: u32,
    pub dpdk_args: Option<String>,
    pub server_dpdk_args: Option<String>,
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

impl DpdkFlags {
    /// The spec's DPDK part for `--engine dpdk`; any of these flags without it is refused.
    fn spec(&self, engine: Engine) -> Result<Option<Box<DpdkSpec>>, SpecError> {
        let given = [
            ("--dpdk-dev", self.dpdk_dev.is_some()),
            ("--server-dpdk-dev", self.server_dpdk_dev.is_some()),
            ("--tx-queues", self.tx_queues.is_some()),
            ("--rx-queues", self.rx_queues.is_some()),
            ("--dpdk-args", self.dpdk_args.is_some()),
            ("--server-dpdk-args", self.server_dpdk_args.is_some()),
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
                sonde_engine::dpdk::Device::parse(d).map_err(|e| SpecError {
                    flag,
                    reason: e.to_string(),
                })?;
            }
        }
        let (client_eal_args, client_testpmd_args) = split_flag("--dpdk-args", &self.dpdk_args)?;
        let (server_eal_args, server_testpmd_args) =
            split_flag("--server-dpdk-args", &self.server_dpdk_args)?;
        Ok(Some(Box::new(DpdkSpec {
            client_device: self.dpdk_dev.clone(),
            server_device: self.server_dpdk_dev.clone(),
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

impl SearchFlags {
    /// The search's bounds, checked, naming the flag at fault.
    fn params(&self) -> Result<SearchParams, SpecError> {
        let refuse = |flag, reason| Err(SpecError { flag, reason });
        if !(0.0..100.0).contains(&self.max_loss) {
            let why = format!("{} is not a percentage in [0, 100)", self.max_loss);
            return refuse("--max-loss", why);
        }
        if !(self.resolution > 0.0 && self.resolution < 50.0) {
            let why = format!("{} is not a percentage in (0, 50)", self.resolution);
            return refuse("--resolution", why);
        }
        Ok(SearchParams {
            max_loss_percent: self.max_loss,
            resolution_percent: self.resolution,
            trials_per_step: self.trials_per_step,
        })
    }
}

/// One test, or with `--search` the zero-loss search made of such tests; against
/// `iperf3 -s`, one test in its protocol (`--search` conflicts with `--iperf3`).
pub fn plan(p: &PpsParams) -> Result<Plan, SpecError> {
    let spec = spec(p)?;
    Ok(match (p.iperf3, p.search.search) {
        (true, _) => Plan::Iperf3(TestSpec::Pps(spec), None),
        (false, true) => Plan::Search(spec, p.search.params()?),
        (false, false) => Plan::Tests(vec![TestSpec::Pps(spec)]),
    })
}

/// The flags as a validated spec, with the defaults chosen from this host (sending
/// threads; with DPDK, testpmd's forwarding lcores) and the DPDK part.
pub fn spec(p: &PpsParams) -> Result<PpsSpec, SpecError> {
    let Some(poll) = p.poll else {
        return Err(SpecError {
            flag: "--poll",
            reason: "'all' is for ping and rpc; pick one mode".into(),
        });
    };
    p.search.params()?;
    let execution = p.execution.clone();
    let dpdk = p.dpdk.spec(execution.engine)?;
    // testpmd's main lcore takes a CPU of its own: its forwarding lcores get the rest.
    let tx_default = dpdk.as_ref().map(|_| {
        let cpus = sonde_engine::usable_cpus() as u32;
        cpus.saturating_sub(1)
            .clamp(1, p.flows.unwrap_or(u32::MAX).max(1))
    });
    let (tx_threads, flows) =
        sonde_engine::pps_threads(p.tx_threads.or(tx_default), p.rx_threads, p.flows, p.gso);
    let mut timing = p.timing.clone();
    if p.search.search {
        timing.duration_ms = p.search.trial_ms;
    }
    let spec = PpsSpec {
        size_bytes: p.size,
        tx_threads,
        rx_threads: p.rx_threads,
        flows,
        batch: p.batch,
        gso: p.gso,
        rate_pps: p.rate,
        timing,
        // testpmd's forwarding lcores always poll.
        poll: if dpdk.is_some() { PollMode::Busy } else { poll },
        execution,
        ipv6: p.ipv6,
        dpdk,
        reverse: p.reverse,
        bidir: p.bidir,
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
