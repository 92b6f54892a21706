//! One side of a stream test: samples the engine's workers and the host on a schedule.
//! The caller (controller or agent) owns the control loop and calls `on_time` when
//! `next_deadline` passes; the window's edges are snapshots of monotonic counters, and
//! every rate divides by measured time, not by the nominal duration.

use std::time::{Duration, Instant};

use sonde_engine::sockopt::TcpInfo;
use sonde_engine::stream::ConnEnd;
use sonde_engine::Placement;
use sonde_probe::hostwatch::HostProbe;
use sonde_results::tcp::TcpSample;
use sonde_results::{
    ConnectionResult, Direction, DirectionResult, IntervalSample, Role, SampleSection, SideResult,
    SideSection, StreamResult, StreamSample, StreamSpec, Transfer,
};

use super::StreamEngine;
use crate::meter::{Measurer, Meter};
use crate::side::Side;
use sonde_engine::tcp_sample as tcp;

/// Counters of every connection at one instant, with its TCP_INFO.
#[derive(Clone)]
struct ConnSnap {
    bytes: Vec<u64>,
    calls: Vec<u64>,
    tcp: Vec<Option<TcpInfo>>,
}

/// Where the side is on its schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Warmup,
    Window,
    Cooldown,
    /// Senders have half-closed; receivers drain until the peer's FIN.
    Draining,
}

pub struct StreamSide {
    role: Role,
    spec: StreamSpec,
    workers: Box<dyn StreamEngine>,
    /// Test-wide index and direction of each connection, in worker order.
    conns: Vec<(u32, Direction)>,
    placement: Placement,
    /// Every connection's counters over the window.
    meter: Meter<ConnSnap>,
    notes: Vec<String>,
    started: Instant,
    phase: Phase,
    /// Intervals closed so far. Each one's sample goes to the caller as it closes and is
    /// not kept: with TCP_INFO for 2,048 connections every 0.1 s for an hour, keeping them
    /// would grow an agent by gigabytes.
    intervals: u32,
}

impl StreamSide {
    /// The side of workers that have just started (the caller has just sent or received
    /// `Start`): `conns` gives each connection's test-wide index and direction, in the
    /// engine's order.
    pub fn start(
        role: Role,
        spec: &StreamSpec,
        conns: Vec<(u32, Direction)>,
        workers: Box<dyn StreamEngine>,
        placement: Placement,
        probe: HostProbe,
        mut notes: Vec<String>,
    ) -> StreamSide {
        notes.extend(probe.notes().iter().cloned());
        let mut side = StreamSide {
            role,
            spec: spec.clone(),
            workers,
            conns,
            meter: Meter::new(probe, &placement),
            placement,
            notes,
            started: Instant::now(),
            phase: Phase::Warmup,
            intervals: 0,
        };
        if spec.timing.warmup_ms == 0 {
            side.open_window();
        }
        side
    }

    fn conn_snap(&self) -> ConnSnap {
        let n = self.workers.connections();
        let mut s = ConnSnap {
            bytes: Vec::with_capacity(n),
            calls: Vec::with_capacity(n),
            tcp: Vec::with_capacity(n),
        };
        for i in 0..n {
            let (b, c) = self.workers.counters(i);
            s.bytes.push(b);
            s.calls.push(c);
            s.tcp.push(self.workers.tcp_info(i));
        }
        s
    }

    /// Each connection's TCP_INFO from the last interval edge to `now`.
    fn tcp_samples(&self, before: &ConnSnap, now: &ConnSnap, secs: f64) -> Vec<TcpSample> {
        (0..now.tcp.len())
            .filter_map(|i| {
                let t = now.tcp[i].as_ref()?;
                let transfer = match self.workers.is_sender(i) {
                    true => Transfer::Send,
                    false => Transfer::Receive,
                };
                let prior = before.tcp.get(i).and_then(Option::as_ref);
                Some(tcp::sample(self.conns[i].0, transfer, prior, t, secs))
            })
            .collect()
    }

    fn open_window(&mut self) {
        self.meter.open(self.conn_snap());
        self.phase = Phase::Window;
    }

    fn at(&self, ms: u64) -> Instant {
        self.started + Duration::from_millis(ms)
    }

    fn tick(&mut self) -> IntervalSample {
        let conns = self.conn_snap();
        let edge = self.meter.edge(conns.clone());
        let window_at = self.meter.opened_at().unwrap_or(edge.at);
        let (mut sent, mut received) = (0, 0);
        for i in 0..conns.bytes.len() {
            let d = conns.bytes[i] - edge.before.bytes[i];
            if self.workers.is_sender(i) {
                sent += d;
            } else {
                received += d;
            }
        }
        let secs = (edge.at - edge.since).as_secs_f64();
        let sample = IntervalSample {
            index: self.intervals,
            start_s: (edge.since - window_at).as_secs_f64(),
            end_s: (edge.at - window_at).as_secs_f64(),
            cpu_busy_percent: edge.cpu_busy_percent,
            partial: false,
            section: SampleSection::Stream(StreamSample {
                sent_bytes: sent,
                received_bytes: received,
                tcp: self.tcp_samples(&edge.before, &conns, secs),
            }),
        };
        self.intervals += 1;
        sample
    }

    /// Closes the window at the last interval edge's counts: the bytes after it belong
    /// to the cool-down.
    fn close_window(&mut self) {
        let conns = match self.meter.last_count() {
            Some(c) => c.clone(),
            None => self.conn_snap(),
        };
        self.meter.close(conns);
        self.phase = Phase::Cooldown;
    }
}

impl Side for StreamSide {
    /// When `on_time` next has something to do.
    fn next_deadline(&self) -> Option<Instant> {
        let s = &self.spec;
        match self.phase {
            Phase::Warmup => Some(self.at(s.timing.warmup_ms)),
            Phase::Window => {
                let done = self.intervals as u64 + 1;
                Some(
                    self.at(s.timing.warmup_ms
                        + (done * s.timing.interval_ms).min(s.timing.duration_ms)),
                )
            }
            Phase::Cooldown => Some(self.at(s.timing.total_ms())),
            Phase::Draining => None,
        }
    }
    /// Advances the schedule to `now`; returns the interval that closed, if any.
    fn on_time(&mut self, now: Instant) -> Option<IntervalSample> {
        let s = self.spec.clone();
        let mut closed = None;
        if self.phase == Phase::Warmup && now >= self.at(s.timing.warmup_ms) {
            self.open_window();
        }
        if self.phase == Phase::Window && self.next_deadline().is_some_and(|d| now >= d) {
            closed = Some(self.tick());
            if self.intervals as u64 * s.timing.interval_ms >= s.timing.duration_ms {
                self.close_window();
            }
        }
        if self.phase == Phase::Cooldown && now >= self.at(s.timing.total_ms()) {
            self.workers.finish();
            self.phase = Phase::Draining;
        }
        closed
    }
    /// True once every worker ended: senders half-closed, receivers saw the peer's FIN.
    fn all_done(&self) -> bool {
        self.workers.all_done()
    }
    fn is_draining(&self) -> bool {
        self.phase == Phase::Draining
    }
    fn planned_end(&self) -> Instant {
        self.at(self.spec.timing.total_ms())
    }
    /// Senders half-close now (the peer asked to stop, or the test was cut short).
    fn finish_senders(&mut self) {
        self.workers.finish();
        if self.phase != Phase::Draining {
            if self.phase == Phase::Window {
                self.close_window();
            }
            self.phase = Phase::Draining;
        }
    }
    /// Stops every worker and turns the counters into this side's result. A window still
    /// open (test cut short) is closed now and the result marked partial.
    fn into_result(mut self: Box<Self>, mut partial: bool) -> SideResult {
        if self.phase == Phase::Warmup {
            self.open_window();
            partial = true;
        }
        if self.meter.is_open() {
            self.close_window();
            partial = true;
        }
        self.workers.abort();
        let ends = self.workers.join();
        let final_snap = self.conn_snap();
        let mut notes = std::mem::take(&mut self.notes);
        notes.extend(self.workers.notes());
        // Opened and closed above.
        let window = self.meter.window(final_snap.clone());
        let (ws, we) = (&window.start, &window.end);
        for (i, e) in ends.iter().enumerate() {
            if let ConnEnd::Failed(msg) = e {
                notes.push(format!("connection {}: {msg}", self.conns[i].0));
                partial = true;
            }
        }
        let window_s = window.seconds();
        let mut directions = Vec::new();
        for dir in [Direction::Forward, Direction::Reverse] {
            let idx: Vec<usize> = (0..self.conns.len())
                .filter(|&i| self.conns[i].1 == dir)
                .collect();
            if idx.is_empty() {
                continue;
            }
            let sends = (dir == Direction::Forward) == (self.role == Role::Client);
            let connections: Vec<ConnectionResult> = idx
                .iter()
                .map(|&i| {
                    let ti = final_snap.tcp[i];
                    let retrans = |s: &ConnSnap| s.tcp[i].map(|t| t.total_retrans);
                    ConnectionResult {
                        index: self.conns[i].0,
                        bytes: we.1.bytes[i] - ws.1.bytes[i],
                        total_bytes: final_snap.bytes[i],
                        retransmits: match (retrans(&ws.1), retrans(&we.1)) {
                            (Some(a), Some(b)) if sends => Some(b.saturating_sub(a) as u64),
                            _ => None,
                        },
                        rtt_us: ti.map(|t| t.rtt_us),
                        rttvar_us: ti.map(|t| t.rttvar_us),
                        snd_cwnd_segments: ti.filter(|_| sends).map(|t| t.snd_cwnd),
                        snd_mss_bytes: ti.map(|t| t.snd_mss),
                        ecn: ti.as_ref().and_then(tcp::connection_ecn),
                    }
                })
                .collect();
            directions.push(DirectionResult {
                direction: dir,
                transfer: if sends {
                    Transfer::Send
                } else {
                    Transfer::Receive
                },
                buffer_bytes: self.spec.buffer_bytes,
                bytes: connections.iter().map(|c| c.bytes).sum(),
                total_bytes: connections.iter().map(|c| c.total_bytes).sum(),
                calls: idx.iter().map(|&i| we.1.calls[i] - ws.1.calls[i]).sum(),
                connections,
            });
        }
        let by = Measurer {
            role: self.role,
            engine: self.workers.engine(),
            placement: &self.placement,
        };
        let section = SideSection::Stream(StreamResult { directions });
        self.meter
            .result(by, &window, window_s, (notes, partial), section)
    }
}
