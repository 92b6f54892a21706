//! What every request client's workers share, whatever carries their requests: the plan,
//! the abort flag and its eventfd, per-worker counters and the histograms' outbox; and the
//! running pool the side reads ([`RrClient`]). The kernel-socket client (`rr_client`) and
//! the AF_XDP one (`xdp::rr_client`) each add their carrier beside it.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hdrhistogram::Histogram;

use super::handoff::Handoff;
use super::plan::{ClientPlan, WorkerEnd};
use crate::counters::Counters;
use crate::kstamps::StageHists;
use crate::marks::TosCounts;
use crate::poller::EventFd;
use crate::pool::{Placement, Pool, Stop};

/// A worker's requests sent (0) and responses received (1).
pub(crate) type WorkerCounters = Counters<2>;
pub(crate) const SENT: usize = 0;
pub(crate) const COMPLETED: usize = 1;

pub(crate) struct Core {
    pub plan: ClientPlan,
    pub aborting: AtomicBool,
    pub wake: EventFd,
    pub counters: Vec<WorkerCounters>,
    /// Each worker's interval histograms, on their way to the reporting thread.
    pub handoff: Handoff,
    /// With `plan.stages`: each worker's interval stages, the same way.
    pub stage_handoff: Option<Handoff<StageHists>>,
    /// With `plan.read_tos`: each worker's answers by arrival TOS, once a worker read
    /// them (`tos_read`: an engine that cannot leaves it false).
    pub tos: Vec<TosCounts>,
    pub tos_read: AtomicBool,
}

impl Core {
    pub fn new(plan: ClientPlan, threads: usize) -> io::Result<Core> {
        let plan_stages = plan.stages;
        Ok(Core {
            plan,
            aborting: AtomicBool::new(false),
            wake: EventFd::new()?,
            counters: (0..threads).map(|_| WorkerCounters::default()).collect(),
            handoff: Handoff::new(threads),
            stage_handoff: plan_stages.then(|| Handoff::new(threads)),
            tos: (0..threads).map(|_| TosCounts::default()).collect(),
            tos_read: AtomicBool::new(false),
        })
    }

    #[inline]
    pub fn aborting(&self) -> bool {
        self.aborting.load(Ordering::Relaxed)
    }

    /// Raises the flag and wakes a worker waiting in ppoll or epoll; the carrier wakes
    /// one blocked in its own call.
    pub fn abort(&self) {
        self.aborting.store(true, Ordering::SeqCst);
        self.wake.signal();
    }
}

/// A client's shared state: the [`Core`] and its carrier, which stops them both.
pub(crate) trait Shared: Stop {
    fn core(&self) -> &Core;
}

/// Running request workers.
pub struct RrClient {
    shared: Arc<dyn Shared>,
    pool: Pool<WorkerEnd>,
}

impl RrClient {
    /// Spawns `placement`'s workers, each running `work` over `shared`.
    pub(crate) fn start<S, F>(placement: &Placement, shared: Arc<S>, work: F) -> io::Result<Self>
    where
        S: Shared,
        F: Fn(&S, usize) -> WorkerEnd + Send + Sync + 'static,
    {
        let counted = move |s: &S, k| {
            let end = work(s, k);
            WorkerEnd {
                syscalls: crate::syscalls::so_far(),
                stamps: crate::kstamps::kinds::so_far(),
                ..end
            }
        };
        let pool = Pool::spawn("sonde-rr", placement, &shared, counted)?;
        Ok(RrClient { shared, pool })
    }

    /// Requests sent and responses received so far, over all workers (monotonic).
    pub fn counts(&self) -> (u64, u64) {
        let [sent, completed] = Counters::sum(&self.shared.core().counters);
        (sent, completed)
    }

    /// Gives `each` the histograms handed over since the last call, with the index of
    /// their interval; they go back to their workers afterwards.
    pub fn drain(&self, each: &mut dyn FnMut(u32, &Histogram<u64>)) {
        self.shared.core().handoff.drain(each)
    }

    /// With stages: gives `each` the stage histograms handed over since the last call,
    /// with the index of their interval.
    pub fn drain_stages(&self, each: &mut dyn FnMut(u32, &StageHists)) {
        if let Some(h) = &self.shared.core().stage_handoff {
            h.drain(each)
        }
    }

    /// The answers matched to a request by the TOS they arrived with, `(tos, answers)`,
    /// and those without one; `None` unless asked (`plan.read_tos`) and read.
    pub fn arrived_tos(&self) -> Option<(Vec<(u8, u64)>, u64)> {
        let core = self.shared.core();
        core.tos_read
            .load(Ordering::Relaxed)
            .then(|| crate::marks::sum(&core.tos))
    }

    pub fn all_done(&self) -> bool {
        self.pool.all_done()
    }

    /// Stops every worker now, also one blocked in a receive.
    pub fn abort(&self) {
        self.pool.abort();
    }

    pub fn join(&mut self) -> Vec<WorkerEnd> {
        self.pool
            .join()
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|e| WorkerEnd {
                    error: Some(e.to_string()),
                    ..Default::default()
                })
            })
            .collect()
    }
}
