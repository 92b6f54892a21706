//! One side of a packet-rate test: the controller's senders or the agent's receivers, with
//! the host observed over the same window. The sender's count and the receiver's are both
//! kept: as in published testpmd reports, the receiver's is the honest one.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use sonde_engine::pps::{PpsReceiver, PpsSender, RxPlan, TxPlan};
use sonde_probe::cpustat::{self, CpuSnapshot};
use sonde_probe::udp;
use sonde_results::{IntervalSample, PpsResult, PpsSpec, Role, SideResult};

use crate::rr_side::poll_of;
use crate::schedule::{Schedule, Tick};
use crate::side::worker_cpus;
use sonde_probe::hostwatch::{self, HostProbe, HostSnap};

/// After the controller's Stop, how long packets still in flight may arrive.
const RX_DRAIN: Duration = Duration::from_millis(200);

enum Engine {
    Tx(PpsSender),
    Rx {
        receiver: PpsReceiver,
        port: u16,
        drops_at_start: Option<u64>,
    },
}

pub struct PpsSide {
    role: Role,
    spec: PpsSpec,
    engine: Engine,
    probe: HostProbe,
    notes: Vec<String>,
    threads: usize,
    pinned_cpus: Option<Vec<usize>>,
    schedule: Schedule,
    start_snap: Option<(HostSnap, u64)>,
    end_snap: Option<(HostSnap, u64)>,
    last_cpu: Option<CpuSnapshot>,
    last_count: u64,
    /// When the last interval edge was measured: rates divide by real, not planned, time.
    last_at: Instant,
    stop_requested: Option<Instant>,
}

impl PpsSide {
    fn new(
        role: Role,
        spec: &PpsSpec,
        engine: Engine,
        probe: HostProbe,
        mut notes: Vec<String>,
        threads: usize,
    ) -> PpsSide {
        let ms = Duration::from_millis;
        let schedule = Schedule::new(
            Instant::now(),
            ms(spec.warmup_ms),
            ms(spec.duration_ms),
            ms(spec.interval_ms),
            Duration::ZERO,
        );
        notes.extend(probe.notes().iter().cloned());
        let cpus = if role == Role::Client {
            &spec.client_cpus
        } else {
            &spec.server_cpus
        };
        PpsSide {
            role,
            spec: spec.clone(),
            engine,
            probe,
            notes,
            threads,
            pinned_cpus: worker_cpus(cpus.as_ref(), threads),
            schedule,
            start_snap: None,
            end_snap: None,
            last_cpu: None,
            last_count: 0,
            last_at: Instant::now(),
            stop_requested: None,
        }
    }

    /// Starts the senders now; they stop by themselves at the end of the window.
    pub fn start_client(
        spec: &PpsSpec,
        flows: Vec<UdpSocket>,
        cookie: u32,
        probe: HostProbe,
        notes: Vec<String>,
    ) -> std::io::Result<PpsSide> {
        let threads = (spec.tx_threads as usize).min(flows.len());
        let stop_at = Instant::now() + Duration::from_millis(spec.warmup_ms + spec.duration_ms);
        let plan = TxPlan {
            threads,
            cpus: spec.client_cpus.clone(),
            payload_bytes: spec.payload_bytes() as usize,
            batch: spec.batch as usize,
            rate_pps: spec.rate_pps,
            stop_at,
            cookie,
            gso: spec.gso,
        };
        let sender = PpsSender::spawn(flows, plan)?;
        Ok(PpsSide::new(
            Role::Client,
            spec,
            Engine::Tx(sender),
            probe,
            notes,
            threads,
        ))
    }

    /// Starts the receivers now, one per socket of the SO_REUSEPORT group on `port`.
    pub fn start_server(
        spec: &PpsSpec,
        sockets: Vec<UdpSocket>,
        port: u16,
        cookie: u32,
        probe: HostProbe,
        mut notes: Vec<String>,
    ) -> std::io::Result<PpsSide> {
        let threads = sockets.len();
        let drops_at_start = match udp::drops_on_port(probe.root(), port) {
            Ok(d) => Some(d),
            Err(e) => {
                notes.push(format!("socket drops not measured: {e}"));
                None
            }
        };
        let plan = RxPlan {
            cpus: spec.server_cpus.clone(),
            batch: spec.batch as usize,
            poll: poll_of(spec.poll),
            flows: spec.flows as usize,
            cookie,
        };
        let receiver = PpsReceiver::spawn(sockets, plan)?;
        Ok(PpsSide::new(
            Role::Server,
            spec,
            Engine::Rx {
                receiver,
                port,
                drops_at_start,
            },
            probe,
            notes,
            threads,
        ))
    }

    /// Packets sent (client) or received (agent) so far.
    fn count(&self) -> u64 {
        match &self.engine {
            Engine::Tx(s) => s.counts().0,
            Engine::Rx { receiver, .. } => receiver.counts().0,
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.schedule.next_deadline()
    }

    pub fn on_time(&mut self, now: Instant) -> Option<IntervalSample> {
        match self.schedule.poll(now)? {
            Tick::Open => {
                let snap = self.probe.snapshot();
                self.last_cpu = snap.cpu.clone();
                self.last_count = self.count();
                self.last_at = snap.at;
                self.start_snap = Some((snap, self.last_count));
                None
            }
            Tick::Interval { k, last } => Some(self.sample(k, last, false)),
        }
    }

    /// Interval k, from the last edge to now; the window's last closes the window too.
    fn sample(&mut self, k: u32, last: bool, cut: bool) -> IntervalSample {
        let cpu = cpustat::read_snapshot(self.probe.root()).ok();
        let count = self.count();
        let now = Instant::now();
        if last {
            self.end_snap = Some((self.probe.snapshot(), count));
        }
        let sample = IntervalSample {
            index: k,
            start_s: self.schedule.offset_s(self.last_at),
            end_s: self.schedule.offset_s(now),
            sent_bytes: 0,
            received_bytes: 0,
            cpu_busy_percent: hostwatch::busy_between(&self.last_cpu, &cpu),
            messages: None,
            latency_ns: None,
            packets: Some(count - self.last_count),
            partial: cut,
        };
        self.last_cpu = cpu;
        self.last_count = count;
        self.last_at = now;
        sample
    }

    /// The controller said stop while an interval was open (this side started a little
    /// after it): that interval is closed now, marked partial, so that it is not lost.
    pub fn cut_interval(&mut self) -> Option<IntervalSample> {
        let k = self.schedule.cut()?;
        Some(self.sample(k, true, true))
    }

    pub fn is_draining(&self) -> bool {
        self.schedule.is_over()
    }

    /// Senders: all have stopped. Receivers: the drain time after Stop has passed.
    pub fn all_done(&self) -> bool {
        match &self.engine {
            Engine::Tx(s) => s.all_done(),
            Engine::Rx { .. } => self.stop_requested.is_some_and(|t| t.elapsed() >= RX_DRAIN),
        }
    }

    pub fn planned_end(&self) -> Instant {
        self.schedule.window_end
    }

    /// The controller ended the test (or asked to stop). A window still open because this
    /// side started a little after the controller is closed now: that skew is not a cut.
    pub fn finish_senders(&mut self) {
        if let Engine::Tx(s) = &self.engine {
            s.abort();
        }
        if self.start_snap.is_some() && self.end_snap.is_none() {
            self.end_snap = Some((self.probe.snapshot(), self.count()));
        }
        self.stop_requested.get_or_insert_with(Instant::now);
    }

    pub fn into_result(mut self, mut partial: bool) -> SideResult {
        partial |= self.start_snap.is_none() || self.end_snap.is_none();
        let start = self
            .start_snap
            .take()
            .unwrap_or_else(|| (self.probe.snapshot(), self.count()));
        let end = self
            .end_snap
            .take()
            .unwrap_or_else(|| (self.probe.snapshot(), self.count()));
        let mut notes = std::mem::take(&mut self.notes);
        let (per_flow, reordered, duplicated, foreign, socket_drops) = match &mut self.engine {
            Engine::Tx(sender) => {
                sender.abort();
                let (sent, err) = sender.join();
                notes.extend(err);
                (sent, 0, 0, 0, None)
            }
            Engine::Rx {
                receiver,
                port,
                drops_at_start,
            } => {
                receiver.abort();
                let foreign = receiver.foreign();
                let (flows, err) = receiver.join();
                notes.extend(err);
                let drops_now = udp::drops_on_port(self.probe.root(), *port).ok();
                let drops = drops_at_start
                    .zip(drops_now)
                    .map(|(a, b)| b.saturating_sub(a));
                (
                    flows.iter().map(|f| f.received).collect(),
                    flows.iter().map(|f| f.reordered).sum(),
                    flows.iter().map(|f| f.duplicated).sum(),
                    foreign,
                    drops,
                )
            }
        };
        let mut result = SideResult::new(
            self.role,
            hostwatch::describe(&self.probe),
            (end.0.at - start.0.at).as_secs_f64(),
            (self.threads as u32, self.pinned_cpus.clone()),
            notes,
            partial,
        );
        result.pps = Some(PpsResult {
            size_bytes: self.spec.size_bytes,
            packets: end.1 - start.1,
            per_flow,
            reordered,
            duplicated,
            foreign,
            socket_drops,
            poll: self.spec.poll.label(),
        });
        hostwatch::fill(&mut result, &start.0, &end.0);
        result
    }
}
