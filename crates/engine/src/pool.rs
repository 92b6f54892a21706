//! One worker pool for every engine: how many workers (the one rule for defaults), where
//! each runs, which connections or flows each owns, and their life (spawn, pin, stop, join). An engine supplies the
//! loop and its shared state; the pool guarantees that no worker outlives its owner.
//!
//! The stop contract: [`Stop::abort`] makes every worker return soon, whatever it is
//! blocked in (each engine says how beside its loop: a flag read per batch, a socket
//! shut down under a blocking call, an eventfd in the epoll set). Dropping a pool that
//! was not joined aborts and joins it.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::affinity::pin_current_thread;

/// Most worker threads chosen without `--threads`; beyond it workers multiplex with epoll.
const MAX_DEFAULT_THREADS: usize = 128;

/// What the workers do, which decides how many there should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Bulk transfer: each connection keeps its worker busy.
    Stream,
    /// Request/response: each connection wakes its worker once per message.
    RequestResponse,
}

/// Worker threads for `units` connections (or flows): as asked, else the fastest default
/// for this host, never more than there are connections (see BENCHMARKS.md):
/// - stream: one blocking thread per connection up to a cap; with 8 connections on a
///   2-core VM that is 6-10 % faster than one epoll thread per core, as iperf2's is;
/// - request/response: one thread per two usable CPUs, each multiplexing its connections
///   with epoll, leaving the other half to the kernel's network processing (and, in a lab
///   or over loopback, to the other end). With 32 connections on one 2-vCPU host (both
///   ends), medians of 5 alternating runs: 32 threads a side 107 k requests/s (P99
///   0.58-0.88 ms), 2 a side 162 k/s (P99 4.2 ms: four spinning threads on two CPUs wait
///   for a scheduler slice), 1 a side 158 k/s (P99 0.34-0.39 ms). A thread per
///   connection sleeps and wakes per message; a multiplexing worker answers many per
///   wake-up.
pub fn worker_threads(work: Work, asked: Option<u32>, units: usize) -> usize {
    let default = match work {
        Work::Stream => units.clamp(1, MAX_DEFAULT_THREADS),
        Work::RequestResponse => units.clamp(1, (usable_cpus() / 2).max(1)),
    };
    asked.map_or(default, |t| t as usize).min(units.max(1))
}

/// Most sending threads `sonde pps` starts without `--tx-threads`.
const MAX_DEFAULT_TX_THREADS: u32 = 32;

/// pps's sending threads and flows, each as asked, else the fastest default for this host:
/// a sending thread per usable CPU (at most one per flow asked for), and a flow per sending
/// thread or receiving thread, whichever are more. On veth the receive path runs on the
/// sender's CPU, so the packet rate scales with the senders' CPUs, not with sendmmsg
/// batching: on a 2-vCPU host, 2 threads and 2 flows received 1.5-1.6x the packets of 1
/// and 1, and 1.8-1.9x the best kernel-socket peer; 2.0x once the receiver napped
/// (bench/pps_compare.py, BENCHMARKS.md).
/// With GSO one thread sends more than the receiver takes: a second one only takes CPU
/// from it (1.44 M against 0.64 M packets/s received), so GSO defaults to one.
pub fn pps_threads(tx: Option<u32>, rx: u32, flows: Option<u32>, gso: bool) -> (u32, u32) {
    let cpus = if gso {
        1
    } else {
        (usable_cpus() as u32).clamp(1, MAX_DEFAULT_TX_THREADS)
    };
    let tx = tx.unwrap_or_else(|| flows.map_or(cpus, |f| f.clamp(1, cpus)));
    (tx, flows.unwrap_or(tx.max(rx)))
}

/// CPUs this process may run on (its affinity mask and cgroup quota).
pub fn usable_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// How many workers, and the CPUs they are pinned to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    pub threads: usize,
    /// Worker k runs on `cpus[k % len]`; `None`: left to the scheduler.
    pub cpus: Option<Vec<usize>>,
}

impl Placement {
    /// `threads` workers for `units` connections or flows: at least one, at most one per unit.
    pub fn new(threads: usize, cpus: Option<Vec<usize>>, units: usize) -> Placement {
        Placement {
            threads: threads.clamp(1, units.max(1)),
            cpus: cpus.filter(|c| !c.is_empty()),
        }
    }

    /// The CPU of worker `k`, if pinned.
    pub fn cpu(&self, k: usize) -> Option<usize> {
        self.cpus.as_ref().map(|c| c[k % c.len()])
    }

    /// The CPU of each worker, for the record; `None`: not pinned.
    pub fn pinned(&self) -> Option<Vec<usize>> {
        self.cpus.as_ref().map(|_| {
            (0..self.threads)
                .map(|k| self.cpu(k).expect("pinned"))
                .collect()
        })
    }

    /// The units worker `k` owns out of `units`: dealt round robin.
    pub fn owned(&self, k: usize, units: usize) -> Vec<usize> {
        (k..units).step_by(self.threads.max(1)).collect()
    }
}

/// How the owner stops every worker of a pool at once.
pub trait Stop: Send + Sync + 'static {
    fn abort(&self);
}

/// What a worker ended with, or why it did not run to its end.
pub type Outcome<T> = Result<T, WorkerError>;

/// Why a worker of a pool did not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("pinning to CPU {cpu}: {source}")]
    Pin { cpu: usize, source: io::Error },
    #[error("a worker did not stop within {} s of its abort; left behind", 2 * STOP_WITHIN.as_secs())]
    LeftBehind,
    #[error("a worker thread panicked")]
    Panicked,
    /// A system call of the worker's loop failed (`sendmmsg`, `recvmmsg`).
    #[error("{call}: {source}")]
    Call {
        call: &'static str,
        source: io::Error,
    },
    #[error("poll on AF_XDP socket {socket}: {source}")]
    Poll { socket: usize, source: io::Error },
    #[error("AF_XDP socket {0}: a worker panicked holding it")]
    SocketPoisoned(usize),
    #[error("AF_XDP sender {sender}: frames still queued {} ms after the end", .after.as_millis())]
    Unflushed { sender: usize, after: Duration },
}

pub struct Pool<T> {
    handles: Vec<JoinHandle<Outcome<T>>>,
    running: Arc<AtomicUsize>,
    stop: Arc<dyn Stop>,
}

/// Counts a worker out when it returns, panics included.
struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl<T: Send + 'static> Pool<T> {
    /// Starts `placement.threads` workers named `{name}-{k}`; each pins itself, then runs
    /// `work(shared, k)`.
    pub fn spawn<S: Stop, F>(
        name: &str,
        placement: &Placement,
        shared: &Arc<S>,
        work: F,
    ) -> io::Result<Pool<T>>
    where
        F: Fn(&S, usize) -> T + Send + Sync + 'static,
    {
        let running = Arc::new(AtomicUsize::new(0));
        let work = Arc::new(work);
        let mut pool = Pool {
            handles: Vec::with_capacity(placement.threads),
            running: Arc::clone(&running),
            stop: Arc::clone(shared) as Arc<dyn Stop>,
        };
        for k in 0..placement.threads {
            let (shared, work) = (Arc::clone(shared), Arc::clone(&work));
            let cpu = placement.cpu(k);
            running.fetch_add(1, Ordering::AcqRel);
            let counted = Running(Arc::clone(&running));
            let h = std::thread::Builder::new()
                .name(format!("{name}-{k}"))
                .spawn(move || {
                    let _counted = counted;
                    if let Some(cpu) = cpu {
                        pin_current_thread(cpu)
                            .map_err(|source| WorkerError::Pin { cpu, source })?;
                    }
                    Ok(work(&shared, k))
                })?;
            pool.handles.push(h);
        }
        Ok(pool)
    }

    /// True once every worker has returned.
    pub fn all_done(&self) -> bool {
        self.running.load(Ordering::Acquire) == 0
    }

    /// Stops every worker now.
    pub fn abort(&self) {
        self.stop.abort();
    }

    /// Waits for every worker; each one's outcome, by worker index (once: later calls
    /// return nothing). Bounded: a worker still running after [`STOP_WITHIN`] is aborted,
    /// and one that ignores that too is left behind (reported), never waited for.
    pub fn join(&mut self) -> Vec<Outcome<T>> {
        let returned = self.wait_done(STOP_WITHIN) || {
            self.stop.abort();
            self.wait_done(STOP_WITHIN)
        };
        self.handles
            .drain(..)
            .map(|h| {
                // A worker is counted out as its closure returns, a moment before its
                // thread is finished: once all are counted out, joining is immediate.
                if !returned && !h.is_finished() {
                    return Err(WorkerError::LeftBehind);
                }
                h.join().unwrap_or(Err(WorkerError::Panicked))
            })
            .collect()
    }
}

impl<T> Pool<T> {
    /// Waits up to `limit` for every worker to return; true if they all did.
    fn wait_done(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while self.running.load(Ordering::Acquire) != 0 {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }
}

/// How long a stop waits for the workers: each wait of theirs ends at an abort, so this
/// bounds a bug, and keeps the agent serving (and SIGTERM working) whatever a worker does.
pub const STOP_WITHIN: Duration = Duration::from_secs(2);

impl<T> Drop for Pool<T> {
    fn drop(&mut self) {
        if !self.handles.is_empty() {
            self.stop.abort();
            self.wait_done(STOP_WITHIN);
            // A worker still running is detached: it holds its own share of the state.
            for h in self.handles.drain(..) {
                if h.is_finished() {
                    let _ = h.join();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    struct Flag(AtomicBool);
    impl Stop for Flag {
        fn abort(&self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// Joining as soon as every worker is counted out (as a side does once `all_done`)
    /// reports each one's outcome, never a worker "left behind" that was only finishing.
    #[test]
    fn a_join_right_after_all_done_gets_every_outcome() {
        let shared = Arc::new(Flag(AtomicBool::new(false)));
        for _ in 0..300 {
            let placement = Placement::new(4, None, 4);
            let mut pool = Pool::spawn("t", &placement, &shared, |_, k| k).unwrap();
            while !pool.all_done() {
                std::hint::spin_loop();
            }
            let got: Vec<usize> = pool.join().into_iter().map(Result::unwrap).collect();
            assert_eq!(got, (0..4).collect::<Vec<_>>());
        }
    }

    #[test]
    fn worker_counts_and_cpus() {
        assert_eq!(worker_threads(Work::Stream, None, 8), 8);
        assert_eq!(worker_threads(Work::Stream, None, 500), 128);
        assert_eq!(worker_threads(Work::Stream, Some(3), 2), 2);
        assert_eq!(worker_threads(Work::Stream, Some(3), 0), 1);
        let cpus = usable_cpus();
        assert_eq!(
            worker_threads(Work::RequestResponse, None, 500),
            (cpus / 2).max(1)
        );
        assert_eq!(worker_threads(Work::RequestResponse, None, 1), 1);
        assert_eq!(worker_threads(Work::RequestResponse, Some(32), 32), 32);
    }

    #[test]
    fn pps_sends_from_every_cpu_with_a_flow_each() {
        let cpus = usable_cpus().min(32) as u32;
        assert_eq!(pps_threads(None, 1, None, false), (cpus, cpus));
        assert_eq!(pps_threads(None, cpus + 3, None, false), (cpus, cpus + 3));
        assert_eq!(pps_threads(None, 1, Some(1), false), (1, 1));
        assert_eq!(pps_threads(None, 1, Some(1000), false), (cpus, 1000));
        assert_eq!(pps_threads(None, 1, Some(1000), true), (1, 1000));
        assert_eq!(pps_threads(None, 2, None, true), (1, 2));
        assert_eq!(pps_threads(Some(3), 1, None, true), (3, 3));
        // What was asked is kept, even when it cannot work: the spec's check names it.
        assert_eq!(pps_threads(Some(4), 1, Some(2), false), (4, 2));
    }

    #[test]
    fn placement_deals_units_and_cpus_round_robin() {
        let p = Placement::new(3, Some(vec![4, 6]), 8);
        assert_eq!(p.pinned(), Some(vec![4, 6, 4]));
        assert_eq!(p.owned(1, 8), vec![1, 4, 7]);
        assert_eq!(Placement::new(5, None, 2).threads, 2);
        assert_eq!(Placement::new(0, None, 0).threads, 1);
        assert_eq!(Placement::new(2, None, 2).pinned(), None);
    }

    #[test]
    fn workers_stop_on_abort_and_dropping_joins_them() {
        let shared = Arc::new(Flag(AtomicBool::new(false)));
        let mut pool = Pool::spawn("t", &Placement::new(2, None, 2), &shared, |s, k| {
            while !s.0.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            k
        })
        .unwrap();
        assert!(!pool.all_done());
        pool.abort();
        let joined: Vec<usize> = pool.join().into_iter().map(Result::unwrap).collect();
        assert_eq!(joined, vec![0, 1]);
        assert!(pool.all_done());

        let shared = Arc::new(Flag(AtomicBool::new(false)));
        let pool: Pool<()> = Pool::spawn("t", &Placement::new(1, None, 1), &shared, |s, _| {
            while !s.0.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
        .unwrap();
        drop(pool);
        assert!(shared.0.load(Ordering::SeqCst));
    }

    #[test]
    fn a_cpu_that_cannot_be_had_is_the_workers_outcome() {
        let shared = Arc::new(Flag(AtomicBool::new(false)));
        let mut pool = Pool::spawn(
            "t",
            &Placement::new(1, Some(vec![1 << 20]), 1),
            &shared,
            |_, k| k,
        )
        .unwrap();
        let out = pool.join();
        assert!(
            matches!(&out[0], Err(e @ WorkerError::Pin { cpu: 1_048_576, .. })
                if e.to_string().starts_with("pinning to CPU 1048576: ")),
            "{out:?}"
        );
    }
}
