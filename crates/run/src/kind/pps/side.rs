//! One side of a packet-rate test: the controller's senders or the agent's receivers, with
//! the host observed over the same window. The sender's count and the receiver's are both
//! kept: as in published testpmd reports, the receiver's is the honest one.

use std::time::{Duration, Instant};

use sonde_engine::pps::Blocked;
use sonde_engine::Placement;
use sonde_probe::hostwatch::HostProbe;
use sonde_probe::udp;
use sonde_results::SampleSection;
use sonde_results::{BlockedSends, IntervalSample, PpsResult, PpsSample, PpsSpec, Role};
use sonde_results::{SideResult, SideSection};

use super::engine::{Drops, RxEngine, TxEngine};
use crate::meter::{Measurer, Meter};
use crate::schedule::{Schedule, Tick};
use crate::side::Side;

/// After the controller's Stop, how long packets still in flight may arrive.
const RX_DRAIN: Duration = Duration::from_millis(200);

/// The engine a pps side drives: a sender, or a receiver with its port and the kernel's drop
/// count at the start.
enum PpsEngine {
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
    engine: PpsEngine,
    /// Packets sent or received over the window, and the sends blocked.
    meter: Meter<Tally>,
    notes: Vec<String>,
    placement: Placement,
    schedule: Schedule,
    stop_requested: Option<Instant>,
    /// The receiver's datagrams by arrival TOS at the last interval edge (marked specs).
    tos_at_edge: Vec<(u8, u64)>,
}

/// What the side counts at the window's edges: packets sent or received, and a kernel
/// sender's sends held back by the queue ahead.
#[derive(Clone, Copy)]
struct Tally {
    packets: u64,
    blocked: Option<Blocked>,
}

impl PpsSide {
    fn new(
        role: Role,
        spec: &PpsSpec,
        engine: PpsEngine,
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
            meter: Meter::new(probe, &placement),
            notes,
            placement,
            schedule,
            stop_requested: None,
            tos_at_edge: Vec::new(),
        }
    }

    /// The side of senders that have just started.
    pub fn client(
        spec: &PpsSpec,
        sender: Box<dyn TxEngine>,
        placement: Placement,
        probe: HostProbe,
    ) -> PpsSide {
        let engine = PpsEngine::Tx(sender);
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
        let engine = PpsEngine::Rx {
            receiver,
            port,
            drops_at_start,
        };
        PpsSide::new(Role::Server, spec, engine, probe, notes, placement)
    }

    fn engine(&self) -> sonde_results::Engine {
        match &self.engine {
            PpsEngine::Tx(s) => s.engine(),
            PpsEngine::Rx { receiver, .. } => receiver.engine(),
        }
    }

    /// Packets sent (client) or received (agent) so far, and the sends blocked.
    fn count(&self) -> Tally {
        match &self.engine {
            PpsEngine::Tx(s) => Tally {
                packets: s.counts().0,
                blocked: s.blocked(),
            },
            PpsEngine::Rx { receiver, .. } => Tally {
                packets: receiver.counts().0,
                blocked: None,
            },
        }
    }

    /// Interval k, from the last edge to now; the window's last closes the window too.
    fn sample(&mut self, k: u32, last: bool, cut: bool) -> IntervalSample {
        let count = self.count();
        let marks = self.interval_marks();
        let edge = self.meter.edge(count);
        if last {
            self.meter.close(count);
        }
        IntervalSample {
            index: k,
            start_s: self.schedule.offset_s(edge.since),
            end_s: self.schedule.offset_s(edge.at),
            cpu_busy_percent: edge.cpu_busy_percent,
            partial: cut,
            section: SampleSection::Pps(PpsSample {
                packets: count.packets - edge.before.packets,
                marks,
                jitter_ms: self.jitter_ms().map(|j| mean(&j)),
                reverse: None,
            }),
        }
    }
}

/// The mean of `v` (0 when empty).
fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

impl PpsSide {
    /// A receiver's per-flow jitter now, milliseconds, where its datagrams carry their
    /// send time.
    fn jitter_ms(&self) -> Option<Vec<f64>> {
        let PpsEngine::Rx { receiver, .. } = &self.engine else {
            return None;
        };
        Some(receiver.jitter_s()?.iter().map(|j| j * 1000.0).collect())
    }

    /// The receiver's datagrams since the last edge by the TOS they arrived with, against
    /// the TOS sent: the interval's marks, when the spec marks its packets.
    fn interval_marks(&mut self) -> Option<sonde_results::marks::DirectionFate> {
        let PpsEngine::Rx { receiver, .. } = &self.engine else {
            return None;
        };
        let (now, unread) = receiver.arrived_tos()?;
        let before = std::mem::replace(&mut self.tos_at_edge, now.clone());
        let was = |tos: u8| before.iter().find(|(t, _)| *t == tos).map_or(0, |p| p.1);
        let since = now.iter().map(|&(t, n)| (t, n.saturating_sub(was(t))));
        arrived_marks(&self.spec, Some((since.collect(), unread)))
    }
}

impl Side for PpsSide {
    fn next_deadline(&self) -> Option<Instant> {
        self.schedule.next_deadline()
    }
    fn on_time(&mut self, now: Instant) -> Option<IntervalSample> {
        match self.schedule.poll(now)? {
            Tick::Open => {
                self.meter.open(self.count());
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
            PpsEngine::Tx(s) => s.all_done(),
            PpsEngine::Rx { .. } => self.stop_requested.is_some_and(|t| t.elapsed() >= RX_DRAIN),
        }
    }
    fn planned_end(&self) -> Instant {
        self.schedule.window_end
    }
    /// The controller ended the test (or asked to stop). A window still open because this
    /// side started a little after the controller is closed now: that skew is not a cut.
    fn finish_senders(&mut self) {
        if let PpsEngine::Tx(s) = &self.engine {
            s.abort();
        }
        if self.meter.is_open() {
            self.meter.close(self.count());
        }
        self.stop_requested.get_or_insert_with(Instant::now);
    }
    fn into_result(mut self: Box<Self>, mut partial: bool) -> SideResult {
        let window = self.meter.window(self.count());
        partial |= window.cut;
        let mut notes = std::mem::take(&mut self.notes);
        let mut marks = None;
        let mut jitter_ms = None;
        let (per_flow, reordered, duplicated, foreign, socket_drops) = match &mut self.engine {
            PpsEngine::Tx(sender) => {
                sender.abort();
                let (sent, err) = sender.join();
                notes.extend(err);
                (sent, 0, 0, 0, None)
            }
            PpsEngine::Rx {
                receiver,
                port,
                drops_at_start,
            } => {
                receiver.abort();
                let foreign = receiver.foreign();
                marks = arrived_marks(&self.spec, receiver.arrived_tos());
                let timed = receiver.jitter_s().is_some();
                notes.extend(receiver.marks_note());
                let (flows, err) = receiver.join();
                notes.extend(err);
                // The joined flows' own: their last datagram's, not the last read's.
                jitter_ms = timed.then(|| {
                    let j = flows.iter().map(|f| f.iperf3.jitter_s * 1000.0);
                    j.collect()
                });
                let drops = match receiver.drops() {
                    Drops::Counted(d) => Some(d),
                    Drops::NotCounted => None,
                    Drops::SocketGroup => {
                        let now = udp::drops_on_port(self.meter.probe().root(), *port).ok();
                        drops_at_start.zip(now).map(|(a, b)| b.saturating_sub(a))
                    }
                };
                (
                    flows.iter().map(|f| f.received).collect(),
                    flows.iter().map(|f| f.reordered).sum(),
                    flows.iter().map(|f| f.duplicated).sum(),
                    foreign,
                    drops,
                )
            }
        };
        let by = Measurer {
            role: self.role,
            engine: self.engine(),
            placement: &self.placement,
        };
        let (bypass, port) = match &self.engine {
            PpsEngine::Tx(s) => (s.bypass(), s.port()),
            PpsEngine::Rx { receiver, .. } => (receiver.bypass(), receiver.port()),
        };
        let (start, end) = (&window.start.1, &window.end.1);
        let blocked = end.blocked.zip(start.blocked).map(|(b, a)| {
            let d = b.since(&a);
            BlockedSends {
                would_block: d.would_block,
                no_buffers: d.no_buffers,
                seconds: d.waited_ns as f64 / 1e9,
            }
        });
        let section = SideSection::Pps(PpsResult {
            size_bytes: self.spec.size_bytes,
            packets: end.packets - start.packets,
            per_flow,
            reordered,
            duplicated,
            foreign,
            socket_drops,
            poll: self.spec.poll.label(),
            port,
            blocked_sends: blocked,
            marks,
            jitter_ms,
            counted_through: None,
            reverse: None,
        });
        let window_s = window.seconds();
        let mut result = self
            .meter
            .result(by, &window, window_s, (notes, partial), section);
        result.bypass = bypass;
        result
    }
}

/// The receiver's arrivals by TOS byte against the TOS the spec sent: the forward
/// direction's marks over the whole test, when the spec marks its packets.
fn arrived_marks(
    spec: &PpsSpec,
    arrived: Option<(Vec<(u8, u64)>, u64)>,
) -> Option<sonde_results::marks::DirectionFate> {
    let sent = spec.execution.marks.data_tos()?;
    let (seen, _) = arrived?;
    let mut fate = sonde_results::marks::DirectionFate::default();
    for (tos, n) in seen {
        fate.record_n(sent, tos, n);
    }
    Some(fate)
}
