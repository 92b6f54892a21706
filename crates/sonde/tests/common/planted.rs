//! Causes planted under a measurement, on threads of the test process: a hog on one CPU
//! and a bulk TCP flow between two namespaces. Each is bounded in time (and bytes) and
//! stops when dropped, also when the test fails.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Moves the calling thread into network namespace `name` (/run/netns/NAME): its sockets
/// and devices are the namespace's from then on; the other threads stay where they are.
pub fn enter_netns(name: &str) -> io::Result<()> {
    let f = File::open(Path::new("/run/netns").join(name))?;
    // SAFETY: an open namespace fd; setns only changes this thread's namespace.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Pins the calling thread to `cpu`.
pub fn pin_thread(cpu: usize) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sleeps of this thread end when asked (no 50 us timer slack): a planted cause's timing
/// is then what the test says.
pub fn exact_timers() {
    // SAFETY: prctl with plain integer arguments, for this thread only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// Puts the calling thread in the real-time class (SCHED_FIFO, the lowest priority): it
/// runs whenever it is ready, ahead of every ordinary task. Needs root (CAP_SYS_NICE).
pub fn fifo_thread() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: 0 is the calling thread; a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A thread that stops when its flag is set or its time is up; joined on drop.
struct Bounded<T> {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<T>>,
}

impl<T: Send + 'static> Bounded<T> {
    fn spawn(f: impl FnOnce(Arc<AtomicBool>) -> T + Send + 'static) -> Bounded<T> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        Bounded {
            stop,
            thread: Some(std::thread::spawn(move || f(flag))),
        }
    }
}

impl<T> Bounded<T> {
    fn finish(&mut self) -> Option<T> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok())
    }
}

impl<T> Drop for Bounded<T> {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A real-time (SCHED_FIFO) thread pinned to one CPU that spins for `on`, sleeps for
/// `off`, and so on, for at most 10 s. While it spins, nothing of the ordinary (CFS) class
/// runs on that CPU: a task woken there waits for the spin's end. Equal or lower-nice CFS
/// hogs do not do this reliably: the kernel's EEVDF scheduler lets a woken task that slept
/// most of the time preempt them at once, or, at nice -19, holds it off for milliseconds,
/// long enough for both ends' caches to go cold and every stage to grow. Half of the CPU
/// stays for everything else.
pub struct FifoHog(Bounded<()>);

impl FifoHog {
    /// The hog, or why this process may not run one (it needs root: CAP_SYS_NICE).
    pub fn start(cpu: usize, on: Duration, off: Duration) -> Result<FifoHog, String> {
        let (tx, rx) = mpsc::channel();
        let mut hog = FifoHog(Bounded::spawn(move |flag| {
            let ready = pin_thread(cpu).map_err(|e| format!("pin to CPU {cpu}: {e}"));
            let ready = ready.and_then(|()| fifo_thread().map_err(|e| format!("SCHED_FIFO: {e}")));
            let go = ready.is_ok();
            let _ = tx.send(ready);
            exact_timers();
            let end = Instant::now() + Duration::from_secs(10);
            while go && going(&flag, end) {
                let until = Instant::now() + on;
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                std::thread::sleep(off);
            }
        }));
        match rx.recv() {
            Ok(Ok(())) => Ok(hog),
            Ok(Err(e)) => {
                hog.0.finish();
                Err(e)
            }
            Err(_) => Err("the hog thread died".into()),
        }
    }
}

/// A bulk TCP flow from one namespace to another: a sender and a sink thread, both on
/// one CPU, for at most `limit` and `max_bytes`.
pub struct Bulk {
    sender: Bounded<io::Result<()>>,
    sink: Bounded<io::Result<()>>,
    received: Arc<AtomicU64>,
}

impl Bulk {
    /// Starts the sink in `to` on `to_addr` (any free port), then the sender in `from`.
    pub fn start(
        from: &str,
        to: &str,
        to_addr: &str,
        cpu: usize,
        max_bytes: u64,
        limit: Duration,
    ) -> Bulk {
        let end = Instant::now() + limit;
        let received = Arc::new(AtomicU64::new(0));
        let (tx, rx) = mpsc::channel();
        let (to, addr, got) = (to.to_string(), to_addr.to_string(), received.clone());
        let sink = Bounded::spawn(move |stop| {
            enter_netns(&to)?;
            pin_thread(cpu)?;
            let l = TcpListener::bind((addr.as_str(), 0))?;
            let _ = tx.send(l.local_addr()?);
            sink(&l, &stop, end, &got)
        });
        let to = rx.recv().expect("the bulk sink's address");
        let from = from.to_string();
        let sender = Bounded::spawn(move |stop| {
            enter_netns(&from)?;
            pin_thread(cpu)?;
            send(to, &stop, end, max_bytes)
        });
        Bulk {
            sender,
            sink,
            received,
        }
    }

    /// Bytes the sink has received so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Stops both ends; fails with what went wrong on either.
    pub fn stop(mut self) -> u64 {
        for (what, r) in [
            ("sender", self.sender.finish()),
            ("sink", self.sink.finish()),
        ] {
            if let Some(Err(e)) = r {
                panic!("bulk {what}: {e}");
            }
        }
        self.received()
    }
}

/// Whether a bounded loop goes on.
fn going(stop: &AtomicBool, end: Instant) -> bool {
    !stop.load(Ordering::Relaxed) && Instant::now() < end
}

/// Whether an error is only a timeout of a read or write that should be retried.
fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

fn sink(l: &TcpListener, stop: &AtomicBool, end: Instant, got: &AtomicU64) -> io::Result<()> {
    l.set_nonblocking(true)?;
    let mut conn = loop {
        match l.accept() {
            Ok((c, _)) => break c,
            Err(e) if timed_out(&e) && going(stop, end) => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => return Err(e),
        }
    };
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut buf = vec![0u8; 1 << 16];
    while going(stop, end) {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                got.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if timed_out(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn send(to: SocketAddr, stop: &AtomicBool, end: Instant, max_bytes: u64) -> io::Result<()> {
    let mut conn = TcpStream::connect_timeout(&to, Duration::from_secs(2))?;
    conn.set_write_timeout(Some(Duration::from_millis(50)))?;
    let chunk = vec![0x5au8; 1 << 16];
    let mut sent = 0u64;
    while sent < max_bytes && going(stop, end) {
        match conn.write(&chunk) {
            Ok(n) => sent += n as u64,
            Err(e) if timed_out(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
