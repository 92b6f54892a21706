//! A rogue controller of data-plane tests: it takes the data port and the cookie, says
//! Start, and leaves the data plane to the test (the agent's UDP echo as a reflector).

use std::fs::File;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::*;
use sonde_engine::udp_match::{stamp_cookie, REQUEST_HEADER_BYTES};
use sonde_proto::{ClientEvent, ClientSession, Session, Timeouts};
use sonde_results::{RrSpec, SideResult, TestSpec, Timing, Transport};
use sonde_run::control::Link;
use sonde_run::controller::{handshake, ControllerError};
use sonde_run::signals::Interrupt;

/// A second address on the client's side: "another host" on the agent's link.
pub const OTHER_ADDR: &str = "198.18.0.3";
pub const MESSAGE: usize = 64;
/// Datagrams of each hostile sort sent.
pub const EACH: usize = 5;
/// Datagrams of the burst from another address: more than the echo's ring has buffers.
pub const BURST: usize = 2000;

pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = File::open(format!("/var/run/netns/{ns}")).unwrap();
            // SAFETY: a namespace file we opened; only this thread moves.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns {ns}: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap()
    })
}

pub fn nonce() -> [u8; sonde_proto::CHALLENGE_BYTES] {
    let mut n = [0u8; sonde_proto::CHALLENGE_BYTES];
    std::io::Read::read_exact(&mut File::open("/dev/urandom").unwrap(), &mut n).unwrap();
    n
}

pub fn udp_ping_uring(sqpoll: bool) -> TestSpec {
    let mut r = RrSpec {
        transport: Transport::Udp,
        request_bytes: MESSAGE as u32,
        response_bytes: MESSAGE as u32,
        sqpoll,
        timing: Timing {
            warmup_ms: 0,
            ..Timing::measuring(4_000)
        },
        ..Default::default()
    };
    r.execution.engine = sonde_results::Engine::Uring;
    TestSpec::Ping(r)
}

/// A controller that runs no workers: it takes the data port and the cookie, says Start,
/// and leaves the data plane to the test.
pub struct Rogue {
    link: Link,
    session: ClientSession,
    agent: SocketAddr,
    pub data: SocketAddr,
    pub cookie: u64,
}

impl Rogue {
    pub fn start(lab: &Lab, agent: &Agent, spec: TestSpec) -> Result<Rogue, ControllerError> {
        let addr: SocketAddr = format!("{}:{}", lab.server_addr, agent.port)
            .parse()
            .unwrap();
        let control = in_netns(&lab.client, || TcpStream::connect(addr).unwrap());
        Rogue::over(control, addr, spec, |_| ())
    }

    /// Hello to Start over `control`; `before_start` gets the data port and cookie once
    /// the agent is ready (to open data connections).
    pub fn over(
        control: TcpStream,
        addr: SocketAddr,
        spec: TestSpec,
        before_start: impl FnOnce(SocketAddr),
    ) -> Result<Rogue, ControllerError> {
        let mut link = Link::new(control).unwrap();
        let mut session = ClientSession::new(
            spec,
            "sonde security test",
            "rogue controller",
            Timeouts::default(),
            Instant::now(),
        )
        .with_nonce(nonce())
        .with_key(Some(rogue::harness_key()))
        .dialling(addr.ip());
        let h = handshake(&mut link, &mut session, addr, &Interrupt::none())?;
        before_start(SocketAddr::new(addr.ip(), h.data_port));
        session.start(Instant::now()).unwrap();
        link.send(&mut session).unwrap();
        Ok(Rogue {
            link,
            session,
            agent: addr,
            data: SocketAddr::new(addr.ip(), h.data_port),
            cookie: h.cookie,
        })
    }

    pub fn finish(mut self) -> SideResult {
        self.session.stop(Instant::now()).unwrap();
        let until = Instant::now() + Duration::from_secs(15);
        while Instant::now() < until {
            self.link.send(&mut self.session).unwrap();
            let step = self.link.step(&mut self.session, Some(until), None);
            while let Some(ev) = self.session.poll_event() {
                if let ClientEvent::Results(r) = ev {
                    return *r;
                }
            }
            step.unwrap_or_else(|e| panic!("agent at {}: {e}", self.agent));
        }
        panic!("no results from {} in 15 s", self.agent)
    }
}

pub fn socket_in(ns: &str, from: &str, to: SocketAddr) -> UdpSocket {
    in_netns(ns, || {
        let s = UdpSocket::bind(format!("{from}:0")).unwrap();
        s.connect(to).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        s
    })
}

pub fn request(len: usize, seq: u64, cookie: u64) -> Vec<u8> {
    let mut d = vec![0x5au8; len.max(REQUEST_HEADER_BYTES)];
    d[..8].copy_from_slice(&seq.to_le_bytes());
    stamp_cookie(&mut d, cookie);
    d.truncate(len);
    d
}

/// A correct request gets exactly one answer, of the request's size, naming it.
pub fn assert_answered(s: &UdpSocket, cookie: u64) {
    s.send(&request(MESSAGE, 42, cookie)).unwrap();
    let mut buf = [0u8; 2048];
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let n = s
        .recv(&mut buf)
        .expect("an answer to the test's own request");
    assert_eq!(n, MESSAGE, "answer as large as the request");
    assert_eq!(
        &buf[..8],
        &42u64.to_le_bytes(),
        "the request's sequence echoed"
    );
}

/// Each datagram of `sorts` sent `EACH` times on `s`; how many in all.
pub fn send_each(s: &UdpSocket, sorts: &[Vec<u8>]) -> usize {
    for d in sorts {
        for _ in 0..EACH {
            s.send(d).unwrap();
        }
    }
    sorts.len() * EACH
}

pub fn replies(s: &UdpSocket, wait: Duration) -> Vec<usize> {
    let (until, mut buf, mut got) = (Instant::now() + wait, [0u8; 70_000], Vec::new());
    while Instant::now() < until {
        if let Ok(n) = s.recv(&mut buf) {
            got.push(n);
        }
    }
    got
}
