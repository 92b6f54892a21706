//! The DPDK engine of a packet-rate side: dpdk-testpmd in txonly mode on the controller
//! and in rxonly mode on the agent. The agent's starts (and receives) before `Ready`; the
//! controller's is up before `Start` and starts sending on it. Counts are the port's own
//! (`show port xstats`), read at each interval edge; each testpmd is stopped at the end
//! of the window and quit when the side joins, killed on any other way out.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use sonde_engine::dpdk::{DpdkError, Forwarding, Testpmd, TxPackets, Xstats};
use sonde_engine::pps::FlowRx;
use sonde_engine::Placement;
use sonde_results::spec::{check_count, MAX_THREADS};
use sonde_results::{Bypass, Engine, PortCounters, PpsSpec, QueueCounters, Role, SpecError};

use super::engine::{senders_stop_at, Drops, PpsBackend, RxEngine, TxEngine};
use crate::kind::dpdk::{self, refuse, Setup, READY_WITHIN};
use crate::kind::path;
use crate::kind::table::Named;
use crate::kind::workers::Workers;

pub struct Dpdk;

impl Named for Dpdk {
    fn engine(&self) -> Engine {
        Engine::Dpdk
    }
}

impl PpsBackend for Dpdk {
    fn refuse(&self, spec: &PpsSpec) -> Result<(), SpecError> {
        refusals(spec)
    }

    fn preflight(&self, spec: &PpsSpec, agent: SocketAddr) -> io::Result<()> {
        preflight(spec, agent)
    }

    /// testpmd takes a second or two to bring its port up: it starts here.
    fn open_tx(
        &self,
        spec: &PpsSpec,
        flows: Vec<UdpSocket>,
        placement: &Placement,
    ) -> io::Result<Box<dyn TxEngine>> {
        Ok(Box::new(open_tx(spec, flows, placement)?))
    }

    fn open_rx(
        &self,
        spec: &PpsSpec,
        (sockets, _): (Vec<UdpSocket>, Vec<String>),
        ip: IpAddr,
        _peer: IpAddr,
    ) -> io::Result<Box<dyn RxEngine>> {
        let mut rx = open_rx(spec, ip)?;
        rx.ports = sockets;
        Ok(Box::new(rx))
    }
}

/// What of a pps spec testpmd cannot run, naming the flag.
fn refusals(spec: &PpsSpec) -> Result<(), SpecError> {
    let refuse = |flag, reason: String| Err(SpecError { flag, reason });
    let Some(d) = &spec.dpdk else {
        return refuse(
            "--engine",
            "dpdk needs its part of the spec (devices, queues)".into(),
        );
    };
    if spec.ipv6 {
        let why = "dpdk: testpmd's txonly builds IPv4 packets only (--tx-ip)";
        return refuse("--engine", why.into());
    }
    if spec.gso {
        let why = format!(
            "the kernel's UDP GSO has no part in --engine {}",
            Engine::Dpdk
        );
        return refuse("--gso", why);
    }
    check_count("--tx-queues", d.tx_queues.max(1), MAX_THREADS)?;
    check_count("--rx-queues", d.rx_queues.max(1), MAX_THREADS)?;
    if !(64..=32768).contains(&d.descriptors) {
        let why = format!("{} is not in 64..=32768", d.descriptors);
        return refuse("--descriptors", why);
    }
    Ok(())
}

/// One side's testpmd and what the side needs to say about it.
struct Port {
    pmd: Mutex<Testpmd>,
    pid: u32,
    /// The device reports its receive drops (net_af_packet in DPDK 22.11 does not).
    counts_drops: bool,
    role: Role,
    bypass: Bypass,
    placement: Placement,
    stopped: AtomicBool,
    /// The last counts read, given again if a read fails.
    last: Mutex<(u64, u64)>,
    /// The first error met talking to testpmd.
    error: Mutex<Option<String>>,
    /// The port's counters once joined.
    end: Mutex<Option<PortCounters>>,
}

/// Starts the sender's testpmd for the flows whose source ports `flows` hold.
fn open_tx(spec: &PpsSpec, flows: Vec<UdpSocket>, placement: &Placement) -> io::Result<Pmd> {
    let first = flows.first().ok_or_else(|| refuse("no flows".into()))?;
    let (local, peer) = (first.local_addr()?, first.peer_addr()?);
    let (src, dst) = (v4(local.ip())?, v4(peer.ip())?);
    let (_, _, peer_mac) = path::path_to(src, dst).map_err(|e| refuse(e.to_string()))?;
    let setup = dpdk::setup(
        spec,
        Role::Client,
        local.ip(),
        placement.cpus.as_deref(),
        placement.threads,
    )?;
    let packets = TxPackets {
        src,
        dst,
        src_port: local.port(),
        dst_port: peer.port(),
        peer_mac,
        size_bytes: spec.size_bytes,
        multi_flow: spec.flows > 1,
    };
    let port = Port::start(spec, &setup, Forwarding::TxOnly(packets), Role::Client)?;
    if let Some(rate) = spec.rate_pps {
        pace(&port, rate, spec.size_bytes, setup.queues)?;
    }
    Ok(Pmd {
        port,
        spec: spec.clone(),
        notes: Vec::new(),
        stop_at: None,
        ports: flows,
    })
}

/// Bytes an Ethernet frame takes on the wire besides its own: FCS, preamble, gap.
const WIRE_EXTRA_BYTES: f64 = 24.0;

/// Paces the sender at `rate` packets/s the one way testpmd can: the device's per-queue
/// rate limiter (`set port 0 queue Q rate MBPS`, in whole Mbit/s of line rate).
fn pace(port: &Port, rate: f64, size_bytes: u32, queues: u32) -> io::Result<()> {
    let mbps = (rate * (size_bytes as f64 + WIRE_EXTRA_BYTES) * 8.0 / 1e6 / queues as f64).ceil();
    for q in 0..queues {
        let answer = port.command(&format!("set port 0 queue {q} rate {mbps}"))?;
        if answer.contains("error") || answer.contains("failed") {
            return Err(refuse(format!(
                "--rate (and --search, whose trials are paced): testpmd paces only through the device's queue rate limiter, and {} has none: {}",
                port.bypass.interface,
                answer.lines().last().unwrap_or("").trim()
            )));
        }
    }
    Ok(())
}

/// Refuses, before the agent is asked, a sender this host cannot run: no root, no
/// testpmd, no device DPDK can drive, too few hugepages.
fn preflight(spec: &PpsSpec, agent: SocketAddr) -> io::Result<()> {
    let dst = v4(agent.ip())?;
    if agent.ip().is_loopback() {
        return Err(refuse(format!(
            "{dst} is loopback: testpmd needs a network device"
        )));
    }
    // The local address toward the agent, as the kernel would choose it.
    let probe = UdpSocket::bind("0.0.0.0:0")?;
    probe.connect(agent)?;
    let local = probe.local_addr()?.ip();
    let cpus = spec.execution.client_cpus.as_deref();
    dpdk::setup(spec, Role::Client, local, cpus, spec.tx_threads as usize).map(|_| ())
}

/// Starts the receiver's testpmd on the device behind `ip`.
fn open_rx(spec: &PpsSpec, ip: IpAddr) -> io::Result<Pmd> {
    v4(ip)?;
    let cpus = spec.execution.server_cpus.as_deref();
    let setup = dpdk::setup(spec, Role::Server, ip, cpus, spec.rx_threads as usize)?;
    let mut notes = setup.notes.clone();
    let port = Port::start(spec, &setup, Forwarding::RxOnly, Role::Server)?;
    if !port.counts_drops {
        notes.push(
            "net_af_packet counts no ring drops: the loss inside the receiving host is not told apart"
                .into(),
        );
    }
    Ok(Pmd {
        port,
        spec: spec.clone(),
        notes,
        stop_at: None,
        ports: Vec::new(),
    })
}

fn v4(ip: IpAddr) -> io::Result<std::net::Ipv4Addr> {
    match ip {
        IpAddr::V4(a) => Ok(a),
        IpAddr::V6(a) => Err(refuse(format!(
            "{a} is IPv6: testpmd's txonly builds IPv4 packets (--tx-ip)"
        ))),
    }
}

fn failed(e: DpdkError) -> io::Error {
    refuse(e.to_string())
}

impl Port {
    fn start(
        spec: &PpsSpec,
        setup: &Setup,
        forwarding: Forwarding,
        role: Role,
    ) -> io::Result<Port> {
        let plan = setup.plan(spec, forwarding, role);
        let pmd = Testpmd::start(&plan, READY_WITHIN).map_err(failed)?;
        let bypass = Bypass {
            interface: plan.device.name().to_string(),
            queues: (0..plan.queues).collect(),
            program: Some(format!(
                "dpdk-testpmd {} on {} forwarding lcore(s)",
                role.pick("txonly", "rxonly"),
                plan.cpus.len()
            )),
            command: Some(pmd.command_line.clone()),
            version: pmd.version.clone(),
            ..Default::default()
        };
        Ok(Port {
            pid: pmd.pid(),
            counts_drops: !bypass.interface.starts_with("net_af_packet"),
            pmd: Mutex::new(pmd),
            role,
            bypass,
            placement: Placement::new(plan.cpus.len(), Some(plan.cpus.clone()), plan.cpus.len()),
            stopped: AtomicBool::new(false),
            last: Mutex::new((0, 0)),
            error: Mutex::new(None),
            end: Mutex::new(None),
        })
    }

    fn pmd(&self) -> std::sync::MutexGuard<'_, Testpmd> {
        self.pmd.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn command(&self, cmd: &str) -> io::Result<String> {
        self.pmd().command(cmd).map_err(failed)
    }

    fn note(&self, e: DpdkError) {
        let mut err = self.error.lock().unwrap_or_else(|e| e.into_inner());
        err.get_or_insert_with(|| e.to_string());
    }

    /// This side's direction's packets and bytes so far.
    fn counts(&self) -> (u64, u64) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match self.pmd().xstats() {
            Ok(x) => {
                let dir = self.dir();
                *last = (
                    x.get(&format!("{dir}_good_packets")),
                    x.get(&format!("{dir}_good_bytes")),
                );
            }
            Err(e) => self.note(e),
        }
        *last
    }

    fn dir(&self) -> &'static str {
        self.role.pick("tx", "rx")
    }

    /// Stops forwarding, once.
    fn stop(&self) {
        if !self.stopped.swap(true, Ordering::AcqRel) {
            if let Err(e) = self.pmd().command("stop") {
                self.note(e);
            }
        }
    }

    /// Stops, reads the port's counters for good and quits testpmd: the total this side
    /// counted, and the first error met.
    fn join(&self) -> (u64, Option<String>) {
        self.stop();
        let mut pmd = self.pmd();
        let read = pmd.xstats().and_then(|x| Ok((x, pmd.fwd_stats()?)));
        let quit = pmd.quit();
        drop(pmd);
        let total = match read {
            Ok((x, fwd)) => {
                let counters = port_counters(&x, self.dir(), &fwd);
                let total = counters.packets;
                *self.end.lock().unwrap_or_else(|e| e.into_inner()) = Some(counters);
                total
            }
            Err(e) => {
                self.note(e);
                self.last.lock().unwrap_or_else(|e| e.into_inner()).0
            }
        };
        if let Err(e) = quit {
            self.note(e);
        }
        (
            total,
            self.error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        )
    }

    fn end(&self) -> Option<PortCounters> {
        self.end.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The port's counters in `dir` (`tx` or `rx`), per queue too.
fn port_counters(x: &Xstats, dir: &str, fwd: &sonde_engine::dpdk::FwdStats) -> PortCounters {
    let rx = dir == "rx";
    let queues = (0..x.queues(dir))
        .map(|q| QueueCounters {
            queue: q,
            packets: x.queue(dir, q, "packets").unwrap_or(0),
            bytes: x.queue(dir, q, "bytes").unwrap_or(0),
            errors: x.queue(dir, q, "errors"),
            dropped: (!rx).then(|| {
                fwd.tx_dropped_by_queue
                    .iter()
                    .find(|(tq, _)| *tq == q)
                    .map_or(0, |(_, d)| *d)
            }),
        })
        .collect();
    PortCounters {
        packets: x.get(&format!("{dir}_good_packets")),
        bytes: x.get(&format!("{dir}_good_bytes")),
        missed: if rx { x.get("rx_missed_errors") } else { 0 },
        errors: x.get(&format!("{dir}_errors")),
        no_mbuf: if rx {
            x.get("rx_mbuf_allocation_errors")
        } else {
            0
        },
        dropped: if rx { 0 } else { fwd.tx_dropped },
        queues,
    }
}

/// One side's testpmd, up before `Start`/`Ready`: the sender's paced but not sending, the
/// receiver's receiving already. It implements both engine traits, and the side uses the
/// one of its role.
struct Pmd {
    port: Port,
    spec: PpsSpec,
    notes: Vec<String>,
    /// The sender's end of the window, once it sends; `None` on the receiver (it stops at
    /// `Stop`).
    stop_at: Option<Instant>,
    /// The kernel sockets whose source ports the sender's packets use; the receiver's
    /// socket group, holding the port until it starts.
    ports: Vec<UdpSocket>,
}

impl Workers for Pmd {
    fn engine(&self) -> sonde_results::Engine {
        Dpdk.engine()
    }
    /// testpmd sends until told: the sender is told at the end of the window.
    fn all_done(&self) -> bool {
        if self.stop_at.is_some_and(|t| Instant::now() >= t) {
            self.port.stop();
        }
        self.port.stopped.load(Ordering::Acquire)
    }
    fn abort(&self) {
        self.port.stop()
    }
    fn bypass(&self) -> Option<Bypass> {
        Some(self.port.bypass.clone())
    }
    fn placed(&self) -> Option<Placement> {
        Some(self.port.placement.clone())
    }
    fn helper(&self) -> Option<u32> {
        Some(self.port.pid)
    }
}

impl TxEngine for Pmd {
    /// Starts sending: `Start` has just been sent.
    fn start(&mut self, _placement: Placement, _cookie: u32) -> io::Result<()> {
        self.port.command("start")?;
        self.stop_at = Some(senders_stop_at(&self.spec));
        Ok(())
    }
    fn counts(&self) -> (u64, u64) {
        self.port.counts()
    }
    fn join(&mut self) -> (Vec<u64>, Option<String>) {
        let (total, err) = self.port.join();
        (vec![total], err)
    }
    fn port(&self) -> Option<PortCounters> {
        self.port.end()
    }
}

impl RxEngine for Pmd {
    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }
    fn start(&mut self, _cookie: u32) -> io::Result<()> {
        self.ports.clear();
        Ok(())
    }
    fn counts(&self) -> (u64, u64) {
        self.port.counts()
    }
    /// testpmd counts every packet the port takes; none is told apart.
    fn foreign(&self) -> u64 {
        0
    }
    fn drops(&self) -> Drops {
        match self.port.end() {
            Some(end) if self.port.counts_drops => Drops::Counted(end.missed + end.no_mbuf),
            _ => Drops::NotCounted,
        }
    }
    fn join(&mut self) -> (Vec<FlowRx>, Option<String>) {
        let (total, err) = self.port.join();
        let mut flow = FlowRx::default();
        flow.received = total;
        (vec![flow], err)
    }
    fn port(&self) -> Option<PortCounters> {
        self.port.end()
    }
}
