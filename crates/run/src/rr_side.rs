//! One side of a request/response test (ping, rpc). The client side owns the engine's
//! request workers and turns their histograms into per-interval and whole-window latency;
//! the agent side owns the echo workers and counts answers. Both observe their host over
//! the same window, so that CPU per message can be set against latency.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sonde_engine::rr_client::{ClientPlan, RrClient, Target};
use sonde_engine::rr_server::{RrServer, ServerPlan, ServerTarget};
use sonde_engine::wait::Poll;
use sonde_probe::cpustat::{self, CpuSnapshot};
use sonde_results::latency::{merge, new_histogram};
use sonde_results::{IntervalSample, LatencySummary, PollMode, Role, RrResult, RrSpec, SideResult};

use crate::schedule::{Schedule, Tick};
use crate::side::{worker_cpus, worker_threads, Work};
use sonde_probe::hostwatch::{self, HostProbe, HostSnap};

/// The client reports interval k this long after it ends, so that every worker has handed
/// over its histogram (workers do so at their first response after the boundary).
const GRACE: Duration = Duration::from_millis(20);
/// After the last request, how long answers may still arrive.
const DRAIN: Duration = Duration::from_secs(2);

enum Engine {
    Client(RrClient),
    Server(RrServer),
}

pub struct RrSide {
    role: Role,
    spec: RrSpec,
    engine: Engine,
    probe: HostProbe,
    notes: Vec<String>,
    socket_options: Vec<String>,
    threads: usize,
    pinned_cpus: Option<Vec<usize>>,
    schedule: Schedule,
    stop_sending_at: Instant,
    start_snap: Option<(HostSnap, u64)>,
    end_snap: Option<(HostSnap, u64)>,
    /// CPU and answer counts at the last report.
    last_cpu: Option<CpuSnapshot>,
    last_count: u64,
    /// When the agent last counted answers: its rates divide by real time.
    last_at: Instant,
    total: Histogram<u64>,
    pending: BTreeMap<u32, Histogram<u64>>,
    stopped: bool,
}

/// What a side is made of besides its spec.
struct Parts {
    engine: Engine,
    started: Instant,
    probe: HostProbe,
    threads: usize,
    pinned_cpus: Option<Vec<usize>>,
    notes: Vec<String>,
    socket_options: Vec<String>,
}

pub fn poll_of(mode: PollMode) -> Poll {
    match mode {
        PollMode::Block => Poll::Block,
        PollMode::Busy => Poll::Busy,
        PollMode::Hybrid { spin_us } => Poll::Hybrid(Duration::from_micros(spin_us as u64)),
    }
}

impl RrSide {
    fn new(role: Role, spec: &RrSpec, parts: Parts) -> RrSide {
        let Parts {
            engine,
            started,
            probe,
            threads,
            pinned_cpus,
            mut notes,
            socket_options,
        } = parts;
        let grace = if role == Role::Client {
            GRACE
        } else {
            Duration::ZERO
        };
        let ms = Duration::from_millis;
        let schedule = Schedule::new(
            started,
            ms(spec.warmup_ms),
            ms(spec.duration_ms),
            ms(spec.interval_ms),
            grace,
        );
        notes.extend(probe.notes().iter().cloned());
        RrSide {
            role,
            spec: spec.clone(),
            engine,
            probe,
            notes,
            socket_options,
            threads,
            pinned_cpus,
            stop_sending_at: schedule.window_end + ms(spec.cooldown_ms),
            schedule,
            start_snap: None,
            end_snap: None,
            last_cpu: None,
            last_count: 0,
            last_at: started,
            total: new_histogram(),
            pending: BTreeMap::new(),
            stopped: false,
        }
    }

    /// Starts the request workers now (the controller has just sent `Start`).
    pub fn start_client(
        spec: &RrSpec,
        target: Target,
        probe: HostProbe,
        notes: Vec<String>,
        socket_options: Vec<String>,
    ) -> std::io::Result<RrSide> {
        let started = Instant::now();
        let units = spec.connections as usize;
        let threads = worker_threads(Work::RequestResponse, spec.client_threads, units);
        let pinned_cpus = worker_cpus(spec.client_cpus.as_ref(), threads);
        let window_start = started + Duration::from_millis(spec.warmup_ms);
        let window_end = window_start + Duration::from_millis(spec.duration_ms);
        let stop = window_end + Duration::from_millis(spec.cooldown_ms);
        let plan = ClientPlan {
            threads,
            cpus: spec.client_cpus.clone(),
            request_bytes: spec.request_bytes as usize,
            response_bytes: spec.response_bytes as usize,
            window: spec.window as usize,
            poll: poll_of(spec.poll),
            pace: spec
                .rate_per_s
                .map(|r| Duration::from_secs_f64(spec.connections as f64 / r)),
            open_loop: spec.open_loop,
            window_start,
            window_end,
            interval: Duration::from_millis(spec.interval_ms),
            stop_sending_at: stop,
            drain_until: stop + DRAIN,
            udp_loss_timeout: Duration::from_secs(1),
        };
        let client = RrClient::spawn(target, plan)?;
        Ok(RrSide::new(
            Role::Client,
            spec,
            Parts {
                engine: Engine::Client(client),
                started,
                probe,
                threads,
                pinned_cpus,
                notes,
                socket_options,
            },
        ))
    }

    /// Starts the echo workers now (the agent has just received `Start`).
    pub fn start_server(
        spec: &RrSpec,
        target: ServerTarget,
        probe: HostProbe,
        notes: Vec<String>,
        socket_options: Vec<String>,
    ) -> std::io::Result<RrSide> {
        let started = Instant::now();
        let units = match &target {
            ServerTarget::Sockets(s) => s.len(),
            _ => 1,
        };
        let threads = worker_threads(Work::RequestResponse, spec.server_threads, units);
        let pinned_cpus = worker_cpus(spec.server_cpus.as_ref(), threads);
        let plan = ServerPlan {
            threads,
            cpus: spec.server_cpus.clone(),
            request_bytes: spec.request_bytes as usize,
            response_bytes: spec.response_bytes as usize,
            poll: poll_of(spec.poll),
            stall: spec.server_stall.map(|s| {
                (
                    started + Duration::from_millis(s.after_ms),
                    Duration::from_millis(s.stall_ms),
                )
            }),
        };
        let server = RrServer::spawn(target, plan)?;
        Ok(RrSide::new(
            Role::Server,
            spec,
            Parts {
                engine: Engine::Server(server),
                started,
                probe,
                threads,
                pinned_cpus,
                notes,
                socket_options,
            },
        ))
    }

    /// Client: responses received; server: responses sent (monotonic).
    fn count(&self) -> u64 {
        match &self.engine {
            Engine::Client(c) => c.counts().1,
            Engine::Server(s) => s.answered(),
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.schedule
            .next_deadline()
            .or((!self.stopped).then_some(self.stop_sending_at))
    }

    fn drain_histograms(&mut self) {
        if let Engine::Client(c) = &self.engine {
            for (idx, h) in c.drain() {
                merge(&mut self.total, &h);
                match self.pending.get_mut(&idx) {
                    Some(p) => merge(p, &h),
                    None => {
                        self.pending.insert(idx, h);
                    }
                }
            }
        }
    }

    pub fn on_time(&mut self, now: Instant) -> Option<IntervalSample> {
        match self.schedule.poll(now) {
            Some(Tick::Open) => {
                let snap = self.probe.snapshot();
                self.last_cpu = snap.cpu.clone();
                self.last_count = self.count();
                self.last_at = snap.at;
                self.start_snap = Some((snap, self.last_count));
                None
            }
            Some(Tick::Interval { k, last }) => {
                if last {
                    self.end_snap = Some((self.probe.snapshot(), self.count()));
                }
                Some(self.sample(k, false))
            }
            None => {
                if self.schedule.is_over() && now >= self.stop_sending_at {
                    self.stopped = true;
                }
                None
            }
        }
    }

    /// Interval k. The client's workers file each response under the interval it
    /// completed in, so its bounds are the planned ones; the agent counts answers when it
    /// wakes, so its bounds are the instants it counted at.
    fn sample(&mut self, k: u32, cut: bool) -> IntervalSample {
        self.drain_histograms();
        let cpu = cpustat::read_snapshot(self.probe.root()).ok();
        let count = self.count();
        let now = Instant::now();
        let (messages, latency_ns, (start_s, end_s)) = match self.role {
            Role::Client => {
                let h = self.pending.remove(&k);
                (
                    Some(h.as_ref().map_or(0, |h| h.len())),
                    h.as_ref().and_then(LatencySummary::of),
                    self.schedule.bounds_s(k),
                )
            }
            Role::Server => (
                Some(count - self.last_count),
                None,
                (
                    self.schedule.offset_s(self.last_at),
                    self.schedule.offset_s(now),
                ),
            ),
        };
        let s = IntervalSample {
            index: k,
            start_s,
            end_s,
            sent_bytes: 0,
            received_bytes: 0,
            cpu_busy_percent: hostwatch::busy_between(&self.last_cpu, &cpu),
            messages,
            latency_ns,
            packets: None,
            partial: cut,
        };
        self.last_cpu = cpu;
        self.last_count = count;
        self.last_at = now;
        s
    }

    /// The controller said stop while an interval was open (this side started a little
    /// after it): that interval is closed now, marked partial, so that it is not lost.
    pub fn cut_interval(&mut self) -> Option<IntervalSample> {
        let k = self.schedule.cut()?;
        self.end_snap = Some((self.probe.snapshot(), self.count()));
        Some(self.sample(k, true))
    }

    pub fn is_draining(&self) -> bool {
        self.stopped
    }

    /// Client: every request worker has ended. Agent: the controller said stop (it does
    /// so only once all its requests were answered).
    pub fn all_done(&self) -> bool {
        match &self.engine {
            Engine::Client(c) => c.all_done(),
            Engine::Server(s) => self.stopped || s.all_done(),
        }
    }

    pub fn planned_end(&self) -> Instant {
        self.stop_sending_at + DRAIN
    }

    /// The controller ended the test. A window still open because this side started a
    /// little after the controller is closed now: that skew is not a cut.
    pub fn finish_senders(&mut self) {
        if self.start_snap.is_some() && self.end_snap.is_none() {
            self.end_snap = Some((self.probe.snapshot(), self.count()));
        }
        self.stopped = true;
    }

    pub fn into_result(mut self, mut partial: bool) -> SideResult {
        // A window that never opened or closed (test cut short) is closed now.
        partial |= self.start_snap.is_none() || self.end_snap.is_none();
        let start = match self.start_snap.take() {
            Some(s) => s,
            None => (self.probe.snapshot(), self.count()),
        };
        let end = match self.end_snap.take() {
            Some(e) => e,
            None => (self.probe.snapshot(), self.count()),
        };
        let mut notes = std::mem::take(&mut self.notes);
        let (mut unanswered, mut not_sent, mut lost, mut sent) = (0, 0, 0, 0);
        let (mut late, mut duplicated, mut foreign) = (0, 0, 0);
        match &mut self.engine {
            Engine::Client(c) => {
                c.abort();
                for e in c.join() {
                    unanswered += e.unanswered;
                    not_sent += e.not_sent;
                    lost += e.lost;
                    late += e.late;
                    duplicated += e.duplicated;
                    foreign += e.foreign;
                    if let Some(err) = e.error {
                        notes.push(err);
                    }
                }
                sent = c.counts().0;
            }
            Engine::Server(s) => {
                s.abort();
                notes.extend(s.join());
            }
        }
        self.drain_histograms();
        // The client's responses are filed by completion time into the planned window;
        // its end snapshot comes GRACE later, which is not window time.
        let window_s = match self.role {
            Role::Client if !partial => {
                (self.schedule.window_end - self.schedule.window_start).as_secs_f64()
            }
            _ => (end.0.at - start.0.at).as_secs_f64(),
        };
        let messages = match self.role {
            Role::Client => self.total.len(),
            Role::Server => end.1 - start.1,
        };
        let mut result = SideResult::new(
            self.role,
            hostwatch::describe(&self.probe),
            window_s,
            (self.threads as u32, self.pinned_cpus.clone()),
            notes,
            partial,
        );
        result.rr = Some(RrResult {
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
            socket_options: self.socket_options.clone(),
        });
        hostwatch::fill(&mut result, &start.0, &end.0);
        result
    }
}
