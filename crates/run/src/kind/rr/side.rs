//! One side of a request/response test (ping, rpc). The client side owns the engine's
//! request workers and turns their histograms into per-interval and whole-window latency;
//! the agent side owns the echo workers and counts answers. Both observe their host over
//! the same window, so that CPU per message can be set against latency.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sonde_engine::Placement;
use sonde_probe::hostwatch::HostProbe;
use sonde_results::latency::{merge, new_histogram};
use sonde_results::side::Syscalls;
use sonde_results::stages::Stages;
use sonde_results::{Engine, IntervalSample, LatencySummary, Role, RrResult};
use sonde_results::{RrSample, RrSpec, SampleSection, SideResult, SideSection};

use super::engine::{EchoEngine, RequestEngine, DRAIN};
use super::stages::StageTallies;
use crate::meter::{Measurer, Meter};
use crate::schedule::{Schedule, Tick};
use crate::side::Side;

/// The client reports interval k this long after it ends, so that every worker has handed
/// over its histogram (workers do so at their first response after the boundary).
const GRACE: Duration = Duration::from_millis(20);
/// The workers this side runs.
pub enum SideEngine {
    Client(Box<dyn RequestEngine>),
    Server(Box<dyn EchoEngine>),
}

pub struct RrSide {
    role: Role,
    spec: RrSpec,
    engine: SideEngine,
    /// Answers over the window: received (client) or sent (agent).
    meter: Meter<u64>,
    notes: Vec<String>,
    socket_options: Vec<String>,
    placement: Placement,
    schedule: Schedule,
    stop_sending_at: Instant,
    total: Histogram<u64>,
    pending: BTreeMap<u32, Histogram<u64>>,
    /// With `--stages`: the whole window's and each interval's not yet reported.
    stages: Option<StageTallies>,
    stopped: bool,
}

/// What a side is made of besides its spec.
pub struct Parts {
    pub engine: SideEngine,
    /// When the workers started: the test's clock.
    pub started: Instant,
    pub probe: HostProbe,
    pub placement: Placement,
    pub notes: Vec<String>,
    pub socket_options: Vec<String>,
}

impl RrSide {
    pub fn new(spec: &RrSpec, parts: Parts) -> RrSide {
        let Parts {
            engine,
            started,
            probe,
            placement,
            mut notes,
            socket_options,
        } = parts;
        let role = match engine {
            SideEngine::Client(_) => Role::Client,
            SideEngine::Server(_) => Role::Server,
        };
        let grace = if role == Role::Client {
            GRACE
        } else {
            Duration::ZERO
        };
        let ms = Duration::from_millis;
        let schedule = Schedule::of(started, &spec.timing, grace);
        notes.extend(probe.notes().iter().cloned());
        RrSide {
            role,
            spec: spec.clone(),
            engine,
            meter: Meter::new(probe, &placement),
            notes,
            socket_options,
            placement,
            stop_sending_at: schedule.window_end + ms(spec.timing.cooldown_ms),
            schedule,
            total: new_histogram(),
            pending: BTreeMap::new(),
            stages: (spec.stages && role == Role::Client).then(StageTallies::default),
            stopped: false,
        }
    }

    fn engine(&self) -> sonde_results::Engine {
        match &self.engine {
            SideEngine::Client(c) => c.engine(),
            SideEngine::Server(s) => s.engine(),
        }
    }

    /// Client: responses received; server: responses sent (monotonic).
    fn count(&self) -> u64 {
        match &self.engine {
            SideEngine::Client(c) => c.counts().1,
            SideEngine::Server(s) => s.answered(),
        }
    }

    fn drain_histograms(&mut self) {
        if let SideEngine::Client(c) = &self.engine {
            let (total, pending) = (&mut self.total, &mut self.pending);
            c.drain(&mut |idx, h| {
                merge(total, h);
                merge(pending.entry(idx).or_insert_with(new_histogram), h);
            });
            if let Some(t) = &mut self.stages {
                c.drain_stages(&mut |idx, s| t.add(idx, s));
            }
        }
    }

    /// Interval k. The client's workers file each response under the interval it
    /// completed in, so its bounds are the planned ones; the agent counts answers when it
    /// wakes, so its bounds are the instants it counted at.
    /// `count` is the one read that also closed the window, when this interval is its
    /// last: read twice, answers between the reads would be in the window and in no
    /// interval.
    fn sample(&mut self, k: u32, cut: bool, count: u64) -> IntervalSample {
        self.drain_histograms();
        let edge = self.meter.edge(count);
        let (stages, oneway) = self.stages.as_mut().map_or((None, None), |t| t.interval(k));
        let (messages, latency_ns, (start_s, end_s)) = match self.role {
            Role::Client => {
                let h = self.pending.remove(&k);
                (
                    h.as_ref().map_or(0, |h| h.len()),
                    h.as_ref().and_then(LatencySummary::of),
                    self.schedule.bounds_s(k),
                )
            }
            Role::Server => (
                count - edge.before,
                None,
                (
                    self.schedule.offset_s(edge.since),
                    self.schedule.offset_s(edge.at),
                ),
            ),
        };
        IntervalSample {
            index: k,
            start_s,
            end_s,
            cpu_busy_percent: edge.cpu_busy_percent,
            partial: cut,
            section: SampleSection::Rr(RrSample {
                messages,
                latency_ns,
                stages,
                oneway: oneway.map(Box::new),
            }),
        }
    }
}

impl Side for RrSide {
    fn next_deadline(&self) -> Option<Instant> {
        self.schedule
            .next_deadline()
            .or((!self.stopped).then_some(self.stop_sending_at))
    }
    fn on_time(&mut self, now: Instant) -> Option<IntervalSample> {
        match self.schedule.poll(now) {
            Some(Tick::Open) => {
                self.meter.open(self.count());
                None
            }
            Some(Tick::Interval { k, last }) => {
                let count = self.count();
                if last {
                    self.meter.close(count);
                }
                Some(self.sample(k, false, count))
            }
            None => {
                if self.schedule.is_over() && now >= self.stop_sending_at {
                    self.stopped = true;
                }
                None
            }
        }
    }
    /// The controller said stop while an interval was open (this side started a little
    /// after it): that interval is closed now, marked partial, so that it is not lost.
    fn cut_interval(&mut self) -> Option<IntervalSample> {
        let k = self.schedule.cut()?;
        let count = self.count();
        self.meter.close(count);
        Some(self.sample(k, true, count))
    }
    fn is_draining(&self) -> bool {
        self.stopped
    }
    /// Client: every request worker has ended. Agent: the controller said stop (it does
    /// so only once all its requests were answered).
    fn all_done(&self) -> bool {
        match &self.engine {
            SideEngine::Client(c) => c.all_done(),
            SideEngine::Server(s) => self.stopped || s.all_done(),
        }
    }
    fn planned_end(&self) -> Instant {
        self.stop_sending_at + DRAIN
    }
    /// The controller ended the test. A window still open because this side started a
    /// little after the controller is closed now: that skew is not a cut.
    fn finish_senders(&mut self) {
        if self.meter.is_open() {
            self.meter.close(self.count());
        }
        self.stopped = true;
    }
    fn into_result(mut self: Box<Self>, mut partial: bool) -> SideResult {
        // A window that never opened or closed (test cut short) is closed now.
        let window = self.meter.window(self.count());
        partial |= window.cut;
        let mut notes = std::mem::take(&mut self.notes);
        let (mut unanswered, mut not_sent, mut lost, mut sent) = (0, 0, 0, 0);
        // The workers' system calls and the messages they carried, and the kernel stamps
        // they read by kind, where counted.
        let (syscalls, read);
        let (mut late, mut duplicated, mut foreign) = (0, 0, 0);
        let (mut allocated, mut merged, mut calls) = (0, 0, 0u64);
        let mut stamps_read = sonde_engine::kstamps::StampKinds::default();
        let arrived = match &self.engine {
            SideEngine::Client(c) => c.arrived_tos(),
            SideEngine::Server(s) => s.arrived_tos(),
        };
        let udp = self.spec.transport == sonde_results::Transport::Udp;
        let engine = self.engine();
        match &arrived {
            _ if !udp || self.spec.execution.marks.data_tos().is_none() => {}
            None => notes.push(format!(
                "the marks that arrived are not read by the {} engine's workers (--engine kernel reads them)",
                engine.name()
            )),
            Some(Err(why)) => notes.push(format!(
                "the marks that arrived are not counted: the kernel refused the {} engine's socket filter ({why})",
                engine.name()
            )),
            Some(Ok(_)) if engine != Engine::Kernel => notes.push(format!(
                "marks counted in the kernel by a socket filter (eBPF), the {} engine's workers reading none: every datagram of the test's length and cookie (answers: length), late ones too",
                engine.name()
            )),
            Some(Ok(_)) => {}
        }
        let marks = self
            .spec
            .execution
            .marks
            .data_tos()
            .zip(arrived.and_then(Result::ok))
            .map(|(sent, (seen, _))| {
                let mut fate = sonde_results::marks::DirectionFate::default();
                for (tos, n) in seen {
                    fate.record_n(sent, tos, n);
                }
                fate
            });
        match &mut self.engine {
            SideEngine::Client(c) => {
                c.abort();
                for e in c.join() {
                    unanswered += e.unanswered;
                    not_sent += e.not_sent;
                    lost += e.lost;
                    late += e.late;
                    duplicated += e.duplicated;
                    foreign += e.foreign;
                    allocated += e.histograms_allocated;
                    merged += e.intervals_merged;
                    calls += e.syscalls;
                    stamps_read += e.stamps;
                    if let Some(err) = e.error {
                        notes.push(err);
                    }
                }
                sent = c.counts().0;
                // Counted by the socket engines; a bypass engine's calls are not, nor
                // a new connection's.
                let counted = c.counts_syscalls() && !self.spec.connect_per_request;
                syscalls = counted.then_some((calls, sent));
                read = c.counts_syscalls().then_some(stamps_read);
                if allocated + merged > 0 {
                    notes.push(format!(
                        "the reporting thread fell behind the measuring workers: {allocated} \
                         interval histogram(s) allocated on a measuring thread, {merged} \
                         interval(s) filed with the next"
                    ));
                }
            }
            SideEngine::Server(s) => {
                s.abort();
                notes.extend(s.join());
                foreign = s.rejected();
                syscalls = s.syscalls().map(|calls| (calls, s.answered()));
                read = s.stamps();
            }
        }
        self.drain_histograms();
        // The client's responses are filed by completion time into the planned window;
        // its end snapshot comes GRACE later, which is not window time.
        let window_s = match self.role {
            Role::Client if !partial => {
                (self.schedule.window_end - self.schedule.window_start).as_secs_f64()
            }
            _ => window.seconds(),
        };
        let messages = match self.role {
            Role::Client => self.total.len(),
            Role::Server => window.end.1 - window.start.1,
        };
        let by = Measurer {
            role: self.role,
            engine: self.engine(),
            placement: &self.placement,
        };
        let section = SideSection::Rr(RrResult {
            poll: self.spec.poll.label(),
            messages,
            sent,
            unanswered,
            not_sent,
            lost,
            late,
            duplicated,
            foreign,
            latency_ns: LatencySummary::of(&self.total),
            stages: self
                .stages
                .as_ref()
                .and_then(|t| t.total.summary())
                .map(|s| Stages {
                    sampled_every: Some(self.spec.stage_every()),
                    ..s
                }),
            oneway: self
                .stages
                .as_ref()
                .and_then(|t| t.oneway.raw())
                .map(Box::new),
            socket_options: self.socket_options.clone(),
            syscalls: syscalls.map(|(calls, messages)| Syscalls { calls, messages }),
            marks,
        });
        let mut result = self
            .meter
            .result(by, &window, window_s, (notes, partial), section);
        if let Some(s) = result.stamps.as_mut() {
            s.read = read.map(|k| sonde_results::stamps::StampsRead {
                software: k.software,
                hardware: k.hardware,
            });
        }
        result.bypass = match &self.engine {
            SideEngine::Client(c) => c.bypass(),
            SideEngine::Server(s) => s.bypass(),
        };
        result
    }
}
