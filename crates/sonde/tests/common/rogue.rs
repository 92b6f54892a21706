//! A rogue controller for the security tests: the library's own controller session driven
//! over a TCP socket from the test process, so a test can send any spec and any part (a
//! third-party client part aimed at a victim, a forged grant) that the CLI would never
//! build, and a thread that runs inside a lab namespace.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use sonde_proto::{ClientEvent, ClientSession, Key, Session, ThirdParty, Timeouts};
use sonde_results::TestSpec;

/// The harness's key, as the agents started by it hold it.
pub fn harness_key() -> Key {
    Key::from_file_bytes(&std::fs::read(super::key_file()).unwrap()).unwrap()
}

/// Runs `f` on a thread inside network namespace `ns` (setns moves only that thread).
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).unwrap();
        // SAFETY: a valid namespace fd; affects only this thread.
        let r = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .unwrap()
}

/// What the agent answered a rogue Setup: ready (its data port, the cookie and any grant),
/// or the error it gave.
#[derive(Debug)]
pub enum Answer {
    Ready {
        data_port: u16,
        cookie: u64,
        grant: Option<sonde_proto::Grant>,
        /// The open control connection: dropping it ends the test.
        conn: TcpStream,
    },
    Refused(String),
}

/// Connects to the agent at `addr`, proves `key` (if any) and sends `spec` with `part`.
pub fn setup(
    addr: SocketAddr,
    spec: TestSpec,
    part: Option<ThirdParty>,
    key: Option<Key>,
) -> Answer {
    let mut nonce = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut nonce))
        .unwrap();
    let mut s = ClientSession::new(spec, "rogue", "rogue", Timeouts::default(), Instant::now())
        .with_nonce(nonce)
        .with_key(key)
        .dialling(addr.ip());
    if let Some(p) = part {
        s = s.with_third_party(p);
    }
    let mut conn = match TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
        Ok(c) => c,
        Err(e) => return Answer::Refused(format!("connect: {e}")),
    };
    conn.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let until = Instant::now() + Duration::from_secs(15);
    let mut buf = vec![0u8; 64 * 1024];
    while Instant::now() < until {
        while let Some(frame) = s.poll_transmit() {
            if let Err(e) = conn.write_all(&frame) {
                return Answer::Refused(format!("write: {e}"));
            }
        }
        while let Some(ev) = s.poll_event() {
            if let ClientEvent::Ready {
                data_port,
                cookie,
                grant,
            } = ev
            {
                return Answer::Ready {
                    data_port,
                    cookie,
                    grant,
                    conn,
                };
            }
        }
        let got = match conn.read(&mut buf) {
            Ok(0) => {
                return Answer::Refused(
                    s.handle_eof()
                        .err()
                        .map_or("closed".into(), |e| e.to_string()),
                )
            }
            Ok(n) => s.handle_bytes(&buf[..n], Instant::now()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                s.handle_timeout(Instant::now())
            }
            Err(e) => return Answer::Refused(format!("read: {e}")),
        };
        if let Err(e) = got {
            return Answer::Refused(e.to_string());
        }
    }
    Answer::Refused("no answer within 15 s".into())
}

/// Connects to the agent at `addr`, proves `key` and asks it for a STAMP run of `spec`
/// toward `reflector` (any spec, any destination: what the CLI would refuse too); the
/// agent's document, or the error it gave.
pub fn stamp(
    addr: SocketAddr,
    spec: sonde_results::StampSpec,
    reflector: SocketAddr,
    key: Option<Key>,
) -> Result<sonde_results::Document, String> {
    stamp_within(addr, spec, reflector, key, Duration::from_secs(20))
}

/// [`stamp`], the connection closed after `within` without the document (a controller that
/// leaves mid-run): "no answer within".
pub fn stamp_within(
    addr: SocketAddr,
    spec: sonde_results::StampSpec,
    reflector: SocketAddr,
    key: Option<Key>,
    within: Duration,
) -> Result<sonde_results::Document, String> {
    let mut s = ClientSession::new(
        TestSpec::Stamp(spec),
        "rogue",
        "rogue",
        Timeouts::default(),
        Instant::now(),
    )
    .with_nonce([7; 32])
    .with_key(key)
    .dialling(addr.ip())
    .with_stamp_reflector(reflector)
    // A rogue asks whatever the agent announced: the agent's own checks must hold.
    .without_stamp_key_check();
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .map_err(|e| format!("connect: {e}"))?;
    conn.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let until = Instant::now() + within;
    let mut buf = vec![0u8; 64 * 1024];
    while Instant::now() < until {
        while let Some(frame) = s.poll_transmit() {
            conn.write_all(&frame).map_err(|e| format!("write: {e}"))?;
        }
        while let Some(ev) = s.poll_event() {
            if let ClientEvent::Stamp(doc) = ev {
                return Ok(*doc);
            }
        }
        let got = match conn.read(&mut buf) {
            Ok(0) => {
                return Err(s
                    .handle_eof()
                    .err()
                    .map_or("closed".into(), |e| e.to_string()))
            }
            Ok(n) => s.handle_bytes(&buf[..n], Instant::now()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                s.handle_timeout(Instant::now())
            }
            Err(e) => return Err(format!("read: {e}")),
        };
        got.map_err(|e| e.to_string())?;
    }
    Err(format!("no answer within {:.1} s", within.as_secs_f64()))
}
