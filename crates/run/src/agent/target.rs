//! The exchange of the target's own proof (`sonde_proto::target`): before a client part
//! sends data, the client agent challenges the serving agent's data port and sends nothing
//! more unless the answer checks out; the serving agent answers, for its part's client only,
//! until the test starts. The challenge takes the transport the test's data does not use
//! (UDP beside a TCP listener, TCP beside a UDP socket), so the data path stays as it is:
//! no data connection or datagram is ever mistaken for a challenge, and a bypass engine's
//! steered UDP port leaves the challenge to the kernel.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sonde_proto::{
    Key, TargetChallenge, TargetTest, TARGET_ANSWER_BYTES, TARGET_CHALLENGE_BYTES,
    TARGET_NONCE_BYTES,
};
use sonde_results::{TestSpec, Transport};

/// Challenges a client part sends over UDP before it gives up: what a silent host gets.
pub const UDP_TRIES: usize = 3;
/// How long each UDP try, the TCP connect and the TCP answer may take.
const WAIT: Duration = Duration::from_millis(500);
/// Answers a serving part gives at most: one test needs one (or a few, over UDP losses).
const MAX_ANSWERS: usize = 8;
/// How often the serving side's prover looks at its stop flag.
const TICK: Duration = Duration::from_millis(20);

/// The transport the challenge of `spec` takes: the one its data does not use.
pub fn via(spec: &TestSpec) -> Transport {
    let data_udp = match spec {
        TestSpec::Pps(_) => true,
        TestSpec::Ping(r) | TestSpec::Rpc(r) => {
            r.transport == Transport::Udp && !r.connect_per_request
        }
        _ => false,
    };
    if data_udp {
        Transport::Tcp
    } else {
        Transport::Udp
    }
}

/// A serving agent that did not prove it serves the test, so the client part sent nothing.
#[derive(Debug, thiserror::Error)]
#[error("{server} did not prove it is the agent serving this test ({why}, to a challenge on its data port over {}): a client part sends only to an agent that expects it, so nothing was sent", name(*.via))]
pub struct NotProven {
    pub server: SocketAddr,
    pub via: Transport,
    pub why: Unproven,
}

/// What came back to the challenge instead of the proof.
#[derive(Debug, thiserror::Error)]
pub enum Unproven {
    #[error("an answer that is not the serving agent's proof")]
    WrongAnswer,
    #[error(transparent)]
    NoAnswer(#[from] io::Error),
}

/// Client agent: whether the serving agent at `test.server` proves it serves `test`.
pub fn prove(key: &Key, test: TargetTest, via: Transport) -> Result<(), NotProven> {
    let nonce: [u8; TARGET_NONCE_BYTES] = crate::random::nonce();
    let challenge = TargetChallenge {
        cookie: test.cookie,
        nonce,
    }
    .encode();
    let answered = match via {
        Transport::Udp => ask_udp(test, &challenge),
        Transport::Tcp => ask_tcp(test, &challenge),
    };
    let why = match answered {
        Ok(answer) if test.check(key, &nonce, &answer) => return Ok(()),
        Ok(_) => Unproven::WrongAnswer,
        Err(e) => Unproven::NoAnswer(e),
    };
    Err(NotProven {
        server: test.server,
        via,
        why,
    })
}

fn name(t: Transport) -> &'static str {
    match t {
        Transport::Udp => "UDP",
        Transport::Tcp => "TCP",
    }
}

fn ask_udp(test: TargetTest, challenge: &[u8]) -> io::Result<Vec<u8>> {
    let s = UdpSocket::bind(SocketAddr::new(test.client, 0))?;
    s.connect(test.server)?;
    s.set_read_timeout(Some(WAIT))?;
    let mut buf = [0u8; TARGET_ANSWER_BYTES + 1];
    for _ in 0..UDP_TRIES {
        s.send(challenge)?;
        let until = Instant::now() + WAIT;
        while Instant::now() < until {
            match s.recv(&mut buf) {
                Ok(n) if n == TARGET_ANSWER_BYTES => return Ok(buf[..n].to_vec()),
                Ok(_) => continue,
                Err(e) if sonde_engine::wait::timed_out(&e) => break,
                // ICMP port unreachable: nothing listens there.
                Err(e) => return Err(e),
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no answer to {UDP_TRIES} challenges"),
    ))
}

fn ask_tcp(test: TargetTest, challenge: &[u8]) -> io::Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&test.server, WAIT)?;
    s.set_read_timeout(Some(WAIT))?;
    s.write_all(challenge)?;
    let mut answer = [0u8; TARGET_ANSWER_BYTES];
    s.read_exact(&mut answer).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock => io::Error::new(io::ErrorKind::TimedOut, "no answer"),
        _ => e,
    })?;
    Ok(answer.to_vec())
}

/// Serving agent: answers its client's challenges at its data port until dropped.
pub struct Prover {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Prover {
    /// Binds `test.server` in the transport `via` and answers there on a thread.
    pub fn start(key: Key, test: TargetTest, via: Transport) -> io::Result<Prover> {
        let stop = Arc::new(AtomicBool::new(false));
        let halt = Arc::clone(&stop);
        let thread = match via {
            Transport::Udp => {
                let s = UdpSocket::bind(test.server)?;
                s.set_read_timeout(Some(TICK))?;
                spawn(move || answer_udp(&s, &key, test, &halt))?
            }
            Transport::Tcp => {
                let l = TcpListener::bind(test.server)?;
                l.set_nonblocking(true)?;
                spawn(move || answer_tcp(&l, &key, test, &halt))?
            }
        };
        Ok(Prover {
            stop,
            thread: Some(thread),
        })
    }
}

fn spawn(f: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("sonde-prover".into())
        .spawn(f)
}

impl Drop for Prover {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn answer_udp(s: &UdpSocket, key: &Key, test: TargetTest, stop: &AtomicBool) {
    let mut buf = [0u8; TARGET_CHALLENGE_BYTES + 1];
    let mut answers = 0;
    while !stop.load(Ordering::Acquire) && answers < MAX_ANSWERS {
        let Ok((n, from)) = s.recv_from(&mut buf) else {
            continue;
        };
        if from.ip() != test.client {
            continue;
        }
        let answer = TargetChallenge::decode(&buf[..n]).and_then(|c| test.answer(key, &c));
        if let Some(a) = answer {
            let _ = s.send_to(&a, from);
            answers += 1;
        }
    }
}

fn answer_tcp(l: &TcpListener, key: &Key, test: TargetTest, stop: &AtomicBool) {
    let mut answers = 0;
    while !stop.load(Ordering::Acquire) && answers < MAX_ANSWERS {
        let (mut s, from) = match l.accept() {
            Ok(c) => c,
            Err(_) => {
                std::thread::sleep(TICK);
                continue;
            }
        };
        if from.ip() != test.client {
            continue;
        }
        let mut buf = [0u8; TARGET_CHALLENGE_BYTES];
        let read = s
            .set_nonblocking(false)
            .and_then(|()| s.set_read_timeout(Some(WAIT)))
            .and_then(|()| s.read_exact(&mut buf));
        let answer = read
            .ok()
            .and_then(|()| TargetChallenge::decode(&buf))
            .and_then(|c| test.answer(key, &c));
        if let Some(a) = answer {
            let _ = s.write_all(&a);
            answers += 1;
        }
    }
}
