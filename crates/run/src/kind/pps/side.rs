//! One side of a packet-rate test: the controller's senders or the agent's receivers, with
//! the host observed over the same window. The sender's count and the receiver's are both
//! kept: as in published testpmd reports, the receiver's is the honest one.

use std::time::{Duration, Instant};

use sonde_engine::Placement;
use sonde_probe::cpustat::{self, CpuSnapshot};
use sonde_probe::hostwatch::{self, HostProbe, HostSnap};
use sonde_probe::udp;
use sonde_results::{IntervalSample, PpsResult, PpsSpec, Role, SideResult};

use super::engine::{RxEngine, TxEngine};
use crate::schedule::{Schedule, Tick};
use crate::side::{Measurer, Side};

/// After the controller's Stop, how long packets still in flight may arrive.
const RX_DRAIN: Duration = Duration::from_millis(200);

enum Engine {
    Tx(Box<dyn TxEngine>),
    Rx {
        receiver: Box<dyn RxEngine>,
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
    placement: Placement,
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
        placement: Placement,
    ) -> PpsSide {
        let schedule = Schedule::of(Instant::now(), &spec.timing, Duration::ZERO);
        notes.extend(probe.notes().iter().cloned());
        PpsSide {
            role,
            spec: spec.clone(),
            engine,
            probe,
            notes,
            placement,
            schedule,
            start_snap: None,
            end_snap: None,
            last_cpu: None,
            last_count: 0,
            last_at: Instant::now(),
            stop_requested: None,
        }
    }

    /// The side of senders that have just started.
    pub fn client(
        spec: &PpsSpec,
        sender: Box<dyn TxEngine>,
        placement: Placement,
        probe: HostProbe,
    ) -> PpsSide {
        let engine = Engine::Tx(sender);
        PpsSide::new(Role::Client, spec, engine, probe, Vec::new(), placement)
    }

    /// The side of receivers that have just started on the socket group bound to `port`.
    pub fn server(
        spec: &PpsSpec,
        receiver: Box<dyn RxEngine>,
        port: u16,
        placement: Placement,
        probe: HostProbe,
        mut notes: Vec<String>,
    ) -> PpsSide {
        let drops_at_start = match udp::drops_on_port(probe.root(), port) {
            Ok(d) => Some(d),
            Err(e) => {
                notes.push(format!("socket drops not measured: {e}"));
                None
            }
        };
        let engine = Engine::Rx {
            receiver,
            port,
            drops_at_start,
        };
        PpsSide::new(Role::Server, spec, engine, probe, notes, placement)
    }

    fn engine_name(&self) -> &'static str {
        match &self.engine {
            Engine::Tx(s) => s.name(),
            Engine::Rx { receiver, .. } => receiver.name(),
        }
    }

    /// Packets sent (client) or received (agent) so far.
    fn count(&self) -> u64 {
        match &self.engine {
            Engine::Tx(s) => s.counts().0,
            Engine::Rx { receiver, .. } => receiver.counts().0,
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
}

impl Side for PpsSide {
    fn next_deadline(&self) -> Option<Instant> {
        self.schedule.next_deadline()
    }
    fn on_time(&mut self, now: Instant) -> Option<IntervalSample> {
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
    /// The controller said stop while an interval was open (this side started a little
    /// after it): that interval is closed now, marked partial, so that it is not lost.
    fn cut_interval(&mut self) -> Option<IntervalSample> {
        let k = self.schedule.cut()?;
        Some(self.sample(k, true, true))
    }
    fn is_draining(&self) -> bool {
        self.schedule.is_over()
    }
    /// Senders: all have stopped. Receivers: the drain time after Stop has passed.
    fn all_done(&self) -> bool {
        match &self.engine {
            Engine::Tx(s) => s.all_done(),
            Engine::Rx { .. } => self.stop_requested.is_some_and(|t| t.elapsed() >= RX_DRAIN),
        }
    }
    fn planned_end(&self) -> Instant {
        self.schedule.window_end
    }
    /// The controller ended the test (or asked to stop). A window still open because this
    /// side started a little after the controller is closed now: that skew is not a cut.
    fn finish_senders(&mut self) {
        if let Engine::Tx(s) = &self.engine {
            s.abort();
        }
        if self.start_snap.is_some() && self.end_snap.is_none() {
            self.end_snap = Some((self.probe.snapshot(), self.count()));
        }
        self.stop_requested.get_or_insert_with(Instant::now);
    }
    fn into_result(mut self: Box<Self>, mut partial: bool) -> SideResult {
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
        let measurer = Measurer {
            role: self.role,
            probe: &self.probe,
            engine: self.engine_name(),
            placement: &self.placement,
        };
        let mut result = measurer.result((end.0.at - start.0.at).as_secs_f64(), notes, partial);
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
