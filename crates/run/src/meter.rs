//! The host and a side's counters observed over the measured window: snapshots at its two
//! edges and a mark at every interval edge. Every kind's side keeps one; what it counts
//! (`C`: packets, answers, each connection's bytes) is its own.

use std::time::Instant;

use crate::apart::Apart;
use sonde_engine::Placement;
use sonde_probe::cpustat::{self, CpuSnapshot};
use sonde_probe::hostwatch::{self, HostProbe, HostSnap};
use sonde_results::{Role, SideResult, SideSection};

pub(crate) struct Meter<C> {
    probe: HostProbe,
    /// The control thread kept off the workers' CPUs while the side lives.
    apart: Apart,
    start: Option<(HostSnap, C)>,
    end: Option<(HostSnap, C)>,
    /// The last interval edge: when, the count then, the CPU then.
    last: Option<(Instant, C, Option<CpuSnapshot>)>,
}

/// One interval, from the last edge to this one: rates divide by real, not planned, time.
pub(crate) struct Edge<C> {
    pub since: Instant,
    pub at: Instant,
    /// The count at the last edge.
    pub before: C,
    pub cpu_busy_percent: Option<f64>,
}

/// The window's two edges, as measured or, for a test cut short, as closed at its end.
pub(crate) struct Window<C> {
    pub start: (HostSnap, C),
    pub end: (HostSnap, C),
    /// An edge was missing: the window did not run its course.
    pub cut: bool,
}

impl<C> Window<C> {
    pub fn seconds(&self) -> f64 {
        (self.end.0.at - self.start.0.at).as_secs_f64()
    }
}

/// Who measured a side's figures, with which engine, on which workers: what every kind's
/// side records about itself before filling in its own part.
pub(crate) struct Measurer<'a> {
    pub role: Role,
    pub engine: sonde_results::Engine,
    pub placement: &'a Placement,
}

impl<C: Clone> Meter<C> {
    /// Called on the side's control thread, once its workers run on `placement`.
    /// Its snapshots read the pinned workers' scheduler counters: a busy worker core is
    /// then told to be their work, their starvation, or other processes' beside them.
    pub fn new(mut probe: HostProbe, placement: &Placement) -> Meter<C> {
        if let Some(cpus) = placement.pinned() {
            probe.watch_workers(&cpus);
        }
        Meter {
            probe,
            apart: Apart::keep(placement),
            start: None,
            end: None,
            last: None,
        }
    }

    pub fn probe(&self) -> &HostProbe {
        &self.probe
    }

    /// When the window opened, if it has.
    pub fn opened_at(&self) -> Option<Instant> {
        self.start.as_ref().map(|s| s.0.at)
    }

    /// The count at the last interval edge (or the window's opening).
    pub fn last_count(&self) -> Option<&C> {
        self.last.as_ref().map(|l| &l.1)
    }

    /// Opens the window at `count`; it is also the first interval's start.
    pub fn open(&mut self, count: C) {
        let snap = self.probe.snapshot();
        self.last = Some((snap.at, count.clone(), snap.cpu.clone()));
        self.start = Some((snap, count));
    }

    /// An interval edge at `count`.
    /// Its instant is taken before the CPU's counters are read, as a snapshot's is: the
    /// caller read `count` just before, and a read of /proc on a busy host can take
    /// milliseconds, which would stretch the interval's time past its count. The last edge,
    /// after the window closed at the same count, is the window's end instant.
    pub fn edge(&mut self, count: C) -> Edge<C> {
        let at = self
            .end
            .as_ref()
            .map_or_else(Instant::now, |(snap, _)| snap.at);
        let cpu = cpustat::read_snapshot(self.probe.root()).ok();
        let (since, before, before_cpu) = self.last.take().unwrap_or((at, count.clone(), None));
        let cpu_busy_percent = hostwatch::busy_between(&before_cpu, &cpu);
        self.last = Some((at, count, cpu));
        Edge {
            since,
            at,
            before,
            cpu_busy_percent,
        }
    }

    /// Closes the window at `count`.
    pub fn close(&mut self, count: C) {
        self.end = Some((self.probe.snapshot(), count));
    }

    /// Open and not yet closed.
    pub fn is_open(&self) -> bool {
        self.start.is_some() && self.end.is_none()
    }

    /// The window's edges; one never measured (the test cut short) is taken now, at
    /// `count`.
    pub fn window(&mut self, count: C) -> Window<C> {
        let (start, end) = (self.start.take(), self.end.take());
        let cut = start.is_none() || end.is_none();
        let now = || (self.probe.snapshot(), count.clone());
        Window {
            start: start.unwrap_or_else(now),
            end: end.unwrap_or_else(now),
            cut,
        }
    }

    /// The side's result: who measured, the host over `window`, and the kind's section.
    pub fn result(
        &self,
        by: Measurer,
        window: &Window<C>,
        window_s: f64,
        (notes, partial): (Vec<String>, bool),
        section: SideSection,
    ) -> SideResult {
        let mut r = SideResult::new(
            by.role,
            hostwatch::describe(&self.probe),
            window_s,
            (by.placement.threads as u32, by.placement.pinned()),
            notes,
        );
        r.partial = partial;
        r.section = section;
        r.engine = Some(by.engine);
        r.cpu_latency = self.probe.cpu_latency().cloned();
        r.stamps = self.probe.stamps().cloned();
        hostwatch::fill(&mut r, &window.start.0, &window.end.0);
        if let Some(c) = r.control_thread.as_mut() {
            self.apart.describe(c);
        }
        r
    }
}
