//! A path with added delay, for a kernel without netem: the router namespace of a
//! `Lab::routed` forwards every packet through a TUN device, and a thread of the test
//! process reads each packet from it and writes it back a set time later.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::planted::{enter_netns, exact_timers, fifo_thread};
use super::Lab;

/// How long before a packet is due the line stops sleeping and spins: a wake-up on a busy
/// machine can be late by this much without the packet being late.
const SPIN: Duration = Duration::from_micros(300);
/// Packets the line handles, and holds at once, at most; and its longest life.
const MAX_PACKETS: u64 = 200_000;
const MAX_HELD: usize = 4096;
const MAX_LIFE: Duration = Duration::from_secs(30);

/// One packet's stay in the line: what it was asked to hold, how long it held.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    pub asked: Duration,
    pub held: Duration,
}

/// Which packets a line holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ways {
    Both,
    /// Those from the client's side (requests).
    ToServer,
    /// Those from the server's side (answers).
    ToClient,
}

/// A running delay line on TUN device `dev`; the device goes away when the line stops.
pub struct DelayLine {
    hold_ns: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<Vec<Held>>>>,
}

impl DelayLine {
    /// Makes TUN device `dev` in the router of `lab` and routes everything the router
    /// forwards through it: packets arriving on either of its veths go to table 100, whose
    /// only route is `dev`; what the line writes back arrives on `dev` and is forwarded by
    /// the main table. `Err`: why this machine cannot (no /dev/net/tun, ...).
    pub fn through_router(lab: &Lab, dev: &str) -> Result<DelayLine, String> {
        DelayLine::routed(lab, dev, Ways::Both)
    }

    /// As [`through_router`](Self::through_router), holding only the packets that go
    /// `ways` (the other direction is forwarded straight).
    pub fn routed(lab: &Lab, dev: &str, ways: Ways) -> Result<DelayLine, String> {
        let (router, rs) = lab.router.clone().expect("a routed lab");
        // The router's interface toward the client, named as Lab::routed names it.
        let rc = format!("{}rc", lab.client_if);
        let iifs: Vec<&String> = match ways {
            Ways::Both => vec![&rc, &rs],
            Ways::ToServer => vec![&rc],
            Ways::ToClient => vec![&rs],
        };
        DelayLine::on_router(&router, &iifs, dev)
    }

    /// Makes TUN device `dev` in namespace `router` and holds every packet it forwards
    /// from interfaces `iifs` (table 100, whose only route is `dev`); what the line writes
    /// back is forwarded by the main table. Packets to the router itself are not held.
    pub fn on_router(router: &str, iifs: &[&String], dev: &str) -> Result<DelayLine, String> {
        let cmd = |program: &str, args: &[&str]| {
            let out = Lab::in_ns(router, program).args(args).output().unwrap();
            assert!(
                out.status.success(),
                "{program} {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let line = DelayLine::start(router, dev)?;
        cmd("ip", &["link", "set", dev, "up"]);
        cmd(
            "ip",
            &["route", "add", "default", "dev", dev, "table", "100"],
        );
        for iif in iifs {
            cmd("ip", &["rule", "add", "iif", iif, "lookup", "100"]);
        }
        // Packets come back in on `dev`, which is not their route back.
        let off = format!(
            "echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter; \
             echo 0 > /proc/sys/net/ipv4/conf/{dev}/rp_filter"
        );
        cmd("sh", &["-c", &off]);
        Ok(line)
    }

    /// Opens `dev` in namespace `ns` (made on open, gone on close) and starts the line,
    /// passing packets straight through until `set_hold`.
    fn start(ns: &str, dev: &str) -> Result<DelayLine, String> {
        let (hold_ns, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (tx, rx) = mpsc::channel();
        let (ns, dev) = (ns.to_string(), dev.to_string());
        let (hold, flag) = (hold_ns.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            // Real-time: on a machine busy with other work an ordinary thread wakes, or
            // is preempted while it spins, up to a scheduler tick (4 ms) late.
            let tun = enter_netns(&ns)
                .and_then(|()| fifo_thread())
                .and_then(|()| open_tun(&dev));
            let _ = tx.send(tun.as_ref().map(|_| ()).map_err(|e| e.to_string()));
            run(tun?, &hold, &flag)
        });
        let mut line = DelayLine {
            hold_ns,
            stop,
            thread: Some(thread),
        };
        match rx.recv() {
            Ok(Ok(())) => Ok(line),
            Ok(Err(e)) => {
                let _ = line.finish();
                Err(format!("a TUN device in the router: {e}"))
            }
            Err(_) => Err("the delay line's thread died".into()),
        }
    }

    /// Each packet read from now on is written back `hold` later.
    pub fn set_hold(&self, hold: Duration) {
        self.hold_ns
            .store(hold.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Stops the line; every packet's stay in it.
    pub fn stop(mut self) -> Vec<Held> {
        self.finish().expect("the delay line")
    }

    fn finish(&mut self) -> io::Result<Vec<Held>> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            _ => Ok(Vec::new()),
        }
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// `TUNSETIFF` (linux/if_tun.h) and the part of `struct ifreq` it reads.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// `/dev/net/tun` attached to a new layer-3 device `dev` (no packet-info header).
fn open_tun(dev: &str) -> io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/net/tun")?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    req.name[..dev.len()].copy_from_slice(dev.as_bytes());
    // SAFETY: an open tun fd and an ifreq-sized, initialised request.
    if unsafe { libc::ioctl(f.as_raw_fd(), TUNSETIFF, &mut req) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(f)
}

/// A packet in the line: when it came, when it is due, its bytes.
struct InLine {
    came: Instant,
    due: Instant,
    bytes: Vec<u8>,
}

/// The line's loop: read what arrives, write back what is due, sleep until the next
/// arrival or a little before the next due time, then spin to it.
fn run(mut tun: File, hold_ns: &AtomicU64, stop: &AtomicBool) -> io::Result<Vec<Held>> {
    exact_timers();
    let end = Instant::now() + MAX_LIFE;
    let mut line: VecDeque<InLine> = VecDeque::new();
    let mut log = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut seen = 0u64;
    while !stop.load(Ordering::Relaxed) && Instant::now() < end && seen < MAX_PACKETS {
        let hold = Duration::from_nanos(hold_ns.load(Ordering::Relaxed));
        loop {
            match tun.read(&mut buf) {
                Ok(n) if line.len() < MAX_HELD => {
                    let came = Instant::now();
                    seen += 1;
                    let bytes = buf[..n].to_vec();
                    line.push_back(InLine {
                        came,
                        due: came + hold,
                        bytes,
                    });
                }
                Ok(_) => seen += 1, // dropped: the line is full
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        while let Some(p) = line.front().filter(|p| p.due <= Instant::now()) {
            // Held until handed back: the write itself goes on to forward the packet
            // (and, within it, to the far namespace), as it does when nothing is held.
            log.push(Held {
                asked: p.due - p.came,
                held: p.came.elapsed(),
            });
            // A full device queue drops the packet, as a wire would.
            let _ = tun.write(&p.bytes);
            line.pop_front();
        }
        let wait = match line.front() {
            Some(p) => p.due.saturating_duration_since(Instant::now()),
            None => Duration::from_millis(20),
        };
        if wait > SPIN {
            wait_readable(&tun, wait - SPIN)?;
        } else {
            std::hint::spin_loop();
        }
    }
    Ok(log)
}

/// Waits until `tun` has a packet or `limit` has passed.
fn wait_readable(tun: &File, limit: Duration) -> io::Result<()> {
    let mut fds = libc::pollfd {
        fd: tun.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: limit.as_secs() as libc::time_t,
        tv_nsec: limit.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd, a valid timeout, no signal mask.
    let r = unsafe { libc::ppoll(&mut fds, 1, &ts, std::ptr::null()) };
    if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
