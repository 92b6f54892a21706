//! What every echo server's workers share, whatever carries the requests: the plan, the
//! abort flag, the injected stall and per-worker counters; and the running pool the side
//! reads ([`RrServer`]). The kernel-socket server (`rr_server`) and the AF_XDP one
//! (`xdp::rr_server`) each add their carrier beside it.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::counters::Counters;
use crate::marks::TosCounts;
use crate::pool::{Placement, Pool, Stop};
use crate::wait::Poll;

#[derive(Debug, Clone)]
pub struct ServerPlan {
    pub placement: Placement,
    pub request_bytes: usize,
    pub response_bytes: usize,
    /// The test's cookie, which every UDP request carries (see `udp_match`).
    pub cookie: u64,
    pub poll: Poll,
    /// Sleep once for the duration, at the first request after the instant.
    pub stall: Option<(Instant, Duration)>,
    /// io_uring: a kernel thread polls the ring's submissions.
    pub sqpoll: bool,
    /// Kernel timestamps of each message; each answer carries the echo's figures.
    pub stages: bool,
    /// With stages: the answers to one request in this many are stamped (the requests
    /// the client sampled; 1: every one).
    pub stage_every: u32,
    /// With stages: the NIC's receive stamps too (`kstamps::Sampling::with_hardware_rx`).
    pub hardware_rx: bool,
    /// A test hook: the echo's real-time clock, as its answers tell it, is off by this.
    pub clock_shift_ns: i64,
    /// UDP: count each request by the TOS it arrived with (`--dscp`/`--ecn`).
    pub read_tos: bool,
}

impl ServerPlan {
    /// A plain echo: no stall, no stages, no clock shift, no TOS read.
    pub fn echo(
        placement: Placement,
        request_bytes: usize,
        response_bytes: usize,
        cookie: u64,
        poll: Poll,
    ) -> ServerPlan {
        ServerPlan {
            placement,
            request_bytes,
            response_bytes,
            cookie,
            poll,
            stall: None,
            sqpoll: false,
            stages: false,
            stage_every: 1,
            hardware_rx: false,
            clock_shift_ns: 0,
            read_tos: false,
        }
    }
}

pub(crate) struct Core {
    pub plan: ServerPlan,
    aborting: AtomicBool,
    stalled: AtomicBool,
    /// Responses sent (`ANSWERED`), UDP datagrams dropped (`REJECTED`) and, once a
    /// worker ended, its system calls (`SYSCALLS`) and the kernel stamps it read by kind
    /// (`SOFTWARE_STAMPS`, `HARDWARE_STAMPS`), per worker.
    pub answered: Vec<Counters<5>>,
    /// With `plan.read_tos`: each worker's requests by arrival TOS, once a worker read
    /// them (`tos_read`: an engine that cannot leaves it false).
    pub tos: Vec<TosCounts>,
    pub tos_read: AtomicBool,
}

pub(crate) const ANSWERED: usize = 0;
pub(crate) const REJECTED: usize = 1;
pub(crate) const SYSCALLS: usize = 2;
pub(crate) const SOFTWARE_STAMPS: usize = 3;
pub(crate) const HARDWARE_STAMPS: usize = 4;

impl Core {
    pub fn new(plan: ServerPlan, threads: usize) -> Core {
        Core {
            answered: (0..threads).map(|_| Counters::default()).collect(),
            tos: (0..threads).map(|_| TosCounts::default()).collect(),
            tos_read: AtomicBool::new(false),
            plan,
            aborting: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
        }
    }

    #[inline]
    pub fn aborting(&self) -> bool {
        self.aborting.load(Ordering::Relaxed)
    }

    /// Raises the flag every worker reads at each wake-up.
    pub fn abort(&self) {
        self.aborting.store(true, Ordering::SeqCst);
    }

    #[inline]
    pub fn count(&self, k: usize) {
        self.answered[k].add_to(ANSWERED, 1);
    }

    #[inline]
    pub fn reject(&self, k: usize, n: u64) {
        self.answered[k].add_to(REJECTED, n);
    }

    /// The injected stall, once, at the first request after its time. Ends early at an
    /// abort: a stall must never outlive its test (it once wedged an agent for good).
    #[inline]
    pub fn maybe_stall(&self) {
        if let Some((at, d)) = self.plan.stall {
            if !self.stalled.load(Ordering::Relaxed)
                && Instant::now() >= at
                && !self.stalled.swap(true, Ordering::Relaxed)
            {
                let until = Instant::now().checked_add(d);
                while !self.aborting.load(Ordering::Relaxed)
                    && until.is_none_or(|u| Instant::now() < u)
                {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }
}

/// A server's shared state: the [`Core`] and its carrier, which stops them both.
pub(crate) trait Shared: Stop {
    fn core(&self) -> &Core;
}

/// Running echo workers.
pub struct RrServer {
    shared: Arc<dyn Shared>,
    pool: Pool<Option<String>>,
}

impl RrServer {
    /// Spawns `placement`'s workers, each running `work` over `shared`.
    pub(crate) fn start<S, F>(placement: &Placement, shared: Arc<S>, work: F) -> io::Result<Self>
    where
        S: Shared,
        F: Fn(&S, usize) -> Option<String> + Send + Sync + 'static,
    {
        let counted = move |s: &S, k| {
            let end = work(s, k);
            let counters = &s.core().answered[k];
            counters.add_to(SYSCALLS, crate::syscalls::so_far());
            let read = crate::kstamps::kinds::so_far();
            counters.add_to(SOFTWARE_STAMPS, read.software);
            counters.add_to(HARDWARE_STAMPS, read.hardware);
            end
        };
        let pool = Pool::spawn("sonde-echo", placement, &shared, counted)?;
        Ok(RrServer { shared, pool })
    }

    /// Responses sent so far (monotonic).
    pub fn answered(&self) -> u64 {
        Counters::sum(&self.shared.core().answered)[ANSWERED]
    }

    /// UDP datagrams dropped unanswered so far: from another address, of another length,
    /// or without the test's cookie.
    pub fn rejected(&self) -> u64 {
        Counters::sum(&self.shared.core().answered)[REJECTED]
    }

    /// The requests by the TOS they arrived with, `(tos, requests)`, and those without
    /// one; `None` unless asked (`plan.read_tos`) and read by the workers.
    pub fn arrived_tos(&self) -> Option<(Vec<(u8, u64)>, u64)> {
        let core = self.shared.core();
        core.tos_read
            .load(Ordering::Relaxed)
            .then(|| crate::marks::sum(&core.tos))
    }

    /// System calls of the workers that ended (all of them, once joined).
    pub fn syscalls(&self) -> u64 {
        Counters::sum(&self.shared.core().answered)[SYSCALLS]
    }

    /// Kernel stamps the workers that ended read, by kind (all of them, once joined).
    pub fn stamps(&self) -> crate::kstamps::StampKinds {
        let c = Counters::sum(&self.shared.core().answered);
        crate::kstamps::StampKinds {
            software: c[SOFTWARE_STAMPS],
            hardware: c[HARDWARE_STAMPS],
        }
    }

    pub fn all_done(&self) -> bool {
        self.pool.all_done()
    }

    /// Stops every worker now.
    pub fn abort(&self) {
        self.pool.abort();
    }

    /// Errors the workers met, if any.
    pub fn join(&mut self) -> Vec<String> {
        self.pool
            .join()
            .into_iter()
            .filter_map(|o| o.unwrap_or_else(|e| Some(e.to_string())))
            .collect()
    }
}
