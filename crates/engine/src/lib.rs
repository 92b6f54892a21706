//! The data plane. Workers are OS threads, optionally pinned, each owning some sockets and
//! looping on epoll + send/recv. Inside a loop there is no lock, no allocation and no
//! syscall beyond the I/O and epoll itself; counters are per connection, written by one
//! thread and read by sampling. Stop requests arrive as eventfd events, not as a flag
//! read per call (as in neper's loop.c).

pub mod affinity;
pub mod counters;
pub mod dpdk;
mod int_option;
pub mod kstamps;
pub mod marks;
pub mod nap;
pub mod pace;
pub mod poller;
pub mod pool;
pub mod pps;
pub mod rr_client;
pub mod rr_server;
pub mod self_noise;
pub mod sockopt;
pub mod stream;
pub mod syscalls;
pub mod tcp_info;
pub mod tcp_sample;
pub mod udp_match;
pub mod uring;
pub mod wait;
pub mod xdp;

/// Highest latency recorded (a minute), the same bound as the result model's histograms.
pub const MAX_LATENCY_NS: u64 = 60_000_000_000;

pub use counters::{ConnCounters, Counters};

pub use pool::{pps_threads, usable_cpus, worker_threads, Placement, Pool, Stop, Work};
pub use sockopt::{SocketOptions, TcpInfo};
pub use stream::{Conns, StreamConn, StreamWorkers};

/// Held by this crate's tests that time a wait, and by those that spin both CPUs (busy
/// polling, SQPOLL): the test threads of one binary run in parallel, and a spinning test
/// beside a timed one measures the scheduler, not the wait.
#[cfg(test)]
pub(crate) fn timing_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
