//! Host-side evidence of one side over the measured window: snapshots of CPU time, TCP
//! retransmits, the test NIC's counters, root qdisc and interrupts, the control thread's
//! own work, and the deltas between two.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::cpustat::{self, CpuSnapshot};
use crate::process::{self, ThreadUsage};
use crate::qdisc::{self, QdiscSnap};
use crate::schedstat::{self, TaskSched};
use crate::{host, interrupts, netdev, route, snmp};
use sonde_results::{ControlThread, NicCounters, SideResult};

/// How this side's host is observed: where the files are, and the test's interface.
pub struct HostProbe {
    root: PathBuf,
    iface: Option<String>,
    irqs: Vec<String>,
    notes: Vec<String>,
    /// Other processes whose CPU is this side's too (an engine's testpmd).
    helpers: Vec<u32>,
    /// The CPUs this process's workers are pinned to, whose threads' scheduler counters
    /// each snapshot reads (empty: not pinned, none read).
    worker_cpus: Vec<usize>,
    /// A CPU latency limit held for as long as this side observes its host.
    cpu_latency: Option<crate::pmqos::CpuLatencyHold>,
    /// What this side did with `--stamps`, and the device setting it holds for as long
    /// as it observes its host (dropping it puts the setting back).
    stamps: Option<(
        sonde_results::stamps::SideStamps,
        Option<Box<dyn Send + Sync>>,
    )>,
}

#[derive(Clone)]
pub struct HostSnap {
    pub at: Instant,
    pub cpu: Option<CpuSnapshot>,
    pub process_cpu_s: Option<f64>,
    pub retrans: Option<u64>,
    pub nic: Option<NicCounters>,
    /// The test interface's root qdisc, if it queues.
    pub qdisc: Option<QdiscSnap>,
    pub irq_total: Option<u64>,
    /// The thread taking the snapshot: a side's control thread.
    pub control: Option<ThreadUsage>,
    /// The pinned workers' scheduler counters, by thread id: their CPU and counters.
    pub workers: BTreeMap<u32, (usize, TaskSched)>,
}

impl HostProbe {
    /// Finds the interface that carries traffic to `peer` and its interrupts.
    pub fn for_peer(peer: IpAddr) -> HostProbe {
        let root = PathBuf::from("/");
        let mut notes = Vec::new();
        let iface = match route::interface_to(&root, peer, &host::local_addresses()) {
            Ok(Some(i)) => Some(i),
            Ok(None) => {
                notes.push(format!(
                    "no route found to {peer}: NIC counters not measured"
                ));
                None
            }
            Err(e) => {
                notes.push(format!(
                    "route lookup failed ({e}): NIC counters not measured"
                ));
                None
            }
        };
        HostProbe::on(root, iface, notes)
    }

    /// Observes interface `iface` (none: no NIC counters) and its interrupts.
    pub fn for_iface(iface: Option<String>) -> HostProbe {
        HostProbe::on(PathBuf::from("/"), iface, Vec::new())
    }

    fn on(root: PathBuf, iface: Option<String>, mut notes: Vec<String>) -> HostProbe {
        let irqs = match (&iface, interrupts::read_interrupts(&root)) {
            (Some(i), Ok(lines)) => interrupts::irqs_of(&root, i, &lines),
            _ => Vec::new(),
        };
        if let (Some(i), true) = (&iface, irqs.is_empty()) {
            notes.push(format!(
                "{i} takes no interrupts of its own (virtual device): interrupt count absent"
            ));
        }
        HostProbe {
            root,
            iface,
            irqs,
            notes,
            helpers: Vec::new(),
            worker_cpus: Vec::new(),
            cpu_latency: None,
            stamps: None,
        }
    }

    /// The interface observed, if any.
    pub fn iface(&self) -> Option<&str> {
        self.iface.as_deref()
    }

    pub fn snapshot(&self) -> HostSnap {
        HostSnap {
            at: Instant::now(),
            cpu: cpustat::read_snapshot(&self.root).ok(),
            process_cpu_s: self.process_cpu_s(),
            retrans: snmp::read_tcp(&self.root).ok().map(|t| t.retrans_segs),
            nic: self
                .iface
                .as_ref()
                .and_then(|i| netdev::read_counters(&self.root, i).ok()),
            qdisc: self.qdisc(),
            irq_total: (!self.irqs.is_empty())
                .then(|| interrupts::read_interrupts(&self.root).ok())
                .flatten()
                .map(|l| interrupts::total_of(&l, &self.irqs)),
            control: process::this_thread(),
            workers: match self.worker_cpus.is_empty() {
                true => BTreeMap::new(),
                false => schedstat::workers(&self.root, std::process::id(), &self.worker_cpus),
            },
        }
    }
}

impl HostProbe {
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The test interface's root qdisc now, read over rtnetlink; only on the live host
    /// (a captured tree has none to ask), and `None` where it does not queue.
    fn qdisc(&self) -> Option<QdiscSnap> {
        let iface = self
            .iface
            .as_deref()
            .filter(|_| self.root == Path::new("/"))?;
        let mut q = qdisc::root(qdisc::ifindex(iface)?).ok()??;
        q.iface = iface.to_string();
        Some(q)
    }

    /// The test interface's name and MTU, where known.
    pub fn mtu(&self) -> Option<(String, u32)> {
        let iface = self.iface.clone()?;
        let text =
            std::fs::read_to_string(self.root.join("sys/class/net").join(&iface).join("mtu"))
                .ok()?;
        Some((iface, text.trim().parse().ok()?))
    }

    /// This process's CPU seconds and its helpers'.
    fn process_cpu_s(&self) -> Option<f64> {
        self.helpers
            .iter()
            .try_fold(process::cpu_seconds()?, |sum, &pid| {
                Some(sum + process::cpu_seconds_of(&self.root, pid)?)
            })
    }

    /// Reads, in each snapshot, the scheduler counters of this process's threads pinned to
    /// one of `cpus` (its workers').
    pub fn watch_workers(&mut self, cpus: &[usize]) {
        self.worker_cpus = cpus.to_vec();
    }

    /// Counts `pid`'s CPU time as this side's process CPU too (a child doing its work).
    pub fn count_process(&mut self, pid: u32) {
        self.helpers.push(pid);
    }

    /// Holds the host's CPU latency limit at `us` until this probe is dropped (the test's
    /// side ends); errors name the device when it cannot be opened (not root).
    pub fn hold_cpu_latency(&mut self, us: u32) -> std::io::Result<()> {
        self.cpu_latency = Some(crate::pmqos::hold(&self.root, us)?);
        Ok(())
    }

    /// The CPU latency limit held, as recorded when it was set.
    /// Keeps what this side did with `--stamps` for its result, and `held` (the device
    /// setting made for the test, put back when dropped) for as long as this probe lives.
    pub fn hold_stamps(
        &mut self,
        said: sonde_results::stamps::SideStamps,
        held: Option<Box<dyn Send + Sync>>,
    ) {
        self.stamps = Some((said, held));
    }

    pub fn stamps(&self) -> Option<&sonde_results::stamps::SideStamps> {
        self.stamps.as_ref().map(|(s, _)| s)
    }

    pub fn cpu_latency(&self) -> Option<&sonde_results::CpuLatency> {
        self.cpu_latency.as_ref().map(|h| &h.record)
    }

    /// Things the reader should know about what could not be observed.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
}

/// Who this host is, with its full inventory (layout, NICs, settings, advice, clock), for the
/// result document's `start.client` / `start.server`.
pub fn describe(probe: &HostProbe) -> sonde_results::HostInfo {
    let mut h = host::host_info(probe.root());
    let mut inv = crate::inventory::collect_live();
    // Each side says how far its clock can be trusted (`sonde clock`).
    inv.clock = Some(crate::clock::live());
    h.inventory = Some(Box::new(inv));
    h
}

/// Fills a side's host figures with the deltas from `a` to `b`.
pub fn fill(side: &mut SideResult, a: &HostSnap, b: &HostSnap) {
    side.cpu = match (&a.cpu, &b.cpu) {
        (Some(x), Some(y)) => Some(cpustat::usage(x, y)),
        _ => None,
    };
    if let (Some(x), Some(y), Some(pins)) = (&a.cpu, &b.cpu, &side.pinned_cpus) {
        side.worker_cpus = cpustat::cores(x, y, pins);
    }
    side.workers = schedstat::shares(&a.workers, &b.workers, (b.at - a.at).as_secs_f64());
    side.process_cpu_s = a.process_cpu_s.zip(b.process_cpu_s).map(|(x, y)| y - x);
    side.tcp_retransmits = a.retrans.zip(b.retrans).map(|(x, y)| y.saturating_sub(x));
    side.nic = match (&a.nic, &b.nic) {
        (Some(x), Some(y)) => Some(netdev::delta(x, y)),
        _ => None,
    };
    side.qdisc = match (&a.qdisc, &b.qdisc) {
        (Some(x), Some(y)) => qdisc::delta(x, y),
        _ => None,
    };
    side.interrupts = a
        .irq_total
        .zip(b.irq_total)
        .map(|(x, y)| y.saturating_sub(x));
    side.control_thread = a.control.zip(b.control).map(|(x, y)| ControlThread {
        wakeups: y.wakeups.saturating_sub(x.wakeups),
        preempted: y.preempted.saturating_sub(x.preempted),
        cpu_ms: (y.cpu_s - x.cpu_s).max(0.0) * 1e3,
        ..Default::default()
    });
}

/// Host CPU busy percent between two /proc/stat snapshots.
pub fn busy_between(a: &Option<CpuSnapshot>, b: &Option<CpuSnapshot>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(cpustat::usage(x, y).host.busy_percent()),
        _ => None,
    }
}
