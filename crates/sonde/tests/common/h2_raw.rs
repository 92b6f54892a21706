//! A raw HTTP/2 (h2c, prior knowledge) attacker for the RPM endpoint's red-team tests: it
//! writes frames no well-behaved client would (resets on a loop, floods of SETTINGS, PING
//! and CONTINUATION, streams past the limit, a window it never reads) and a reader thread
//! tallies what the server answered (GOAWAY and its code, RST_STREAM codes, response
//! heads, DATA bytes, WINDOW_UPDATE credit, end of file). Header blocks are HPACK with
//! static-table names and literal values, never indexed: no encoder state to keep.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const PING: u8 = 6;
pub const GOAWAY: u8 = 7;
pub const WINDOW_UPDATE: u8 = 8;
pub const CONTINUATION: u8 = 9;

pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 4;
pub const CANCEL: u32 = 0x8;
pub const REFUSED_STREAM: u32 = 0x7;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// One frame's bytes.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A SETTINGS frame of (identifier, value) pairs.
pub fn settings(pairs: &[(u16, u32)]) -> Vec<u8> {
    let mut p = Vec::new();
    for (id, v) in pairs {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    frame(SETTINGS, 0, 0, &p)
}

pub fn window_update(stream: u32, credit: u32) -> Vec<u8> {
    frame(WINDOW_UPDATE, 0, stream, &credit.to_be_bytes())
}

pub fn rst_stream(stream: u32, code: u32) -> Vec<u8> {
    frame(RST_STREAM, 0, stream, &code.to_be_bytes())
}

pub fn ping(n: u64) -> Vec<u8> {
    frame(PING, 0, 0, &n.to_be_bytes())
}

/// HPACK: a literal header without indexing, its name from the static table.
fn literal(name_index: u8, value: &str) -> Vec<u8> {
    assert!(name_index < 15 && value.len() < 127);
    let mut b = vec![name_index, value.len() as u8];
    b.extend_from_slice(value.as_bytes());
    b
}

/// A request's header block: `method` is GET or POST (static entries 2 and 3).
pub fn request_block(post: bool, path: &str) -> Vec<u8> {
    let mut b = vec![if post { 0x83 } else { 0x82 }, 0x86]; // :method, :scheme http
    b.extend(literal(4, path)); // :path
    b.extend(literal(1, "127.0.0.1")); // :authority
    b
}

/// What the server sent, as the reader thread saw it.
#[derive(Default)]
pub struct Seen {
    /// GOAWAY's error code, once one came.
    pub goaway: Mutex<Option<u32>>,
    pub resets: Mutex<HashMap<u32, u64>>,
    /// Response header blocks (HEADERS frames on a stream).
    pub heads: AtomicU64,
    pub data_bytes: AtomicU64,
    pub pings_acked: AtomicU64,
    pub settings_acked: AtomicU64,
    /// The connection's send window as the server granted it (starts at 65 535).
    pub conn_credit: AtomicI64,
    pub closed: AtomicBool,
    pub closed_at: Mutex<Option<Instant>>,
}

impl Seen {
    pub fn resets_with(&self, code: u32) -> u64 {
        *self.resets.lock().unwrap().get(&code).unwrap_or(&0)
    }

    pub fn goaway(&self) -> Option<u32> {
        *self.goaway.lock().unwrap()
    }

    /// Closed by the server: a GOAWAY or its end of file.
    pub fn cut(&self) -> bool {
        self.goaway().is_some() || self.closed.load(Ordering::Relaxed)
    }
}

/// A connection to the endpoint with its preface and SETTINGS written, and a thread
/// reading (and, unless `read` is false, consuming) everything the server sends.
pub struct Attacker {
    pub out: TcpStream,
    pub seen: Arc<Seen>,
    pub opened: Instant,
}

impl Attacker {
    /// `read`: whether the reader thread drains the socket (a slow reader does not).
    pub fn connect(addr: SocketAddr, initial: &[(u16, u32)], read: bool) -> Attacker {
        let mut out = TcpStream::connect(addr).unwrap();
        out.set_nodelay(true).unwrap();
        out.set_write_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        out.write_all(PREFACE).unwrap();
        out.write_all(&settings(initial)).unwrap();
        let seen = Arc::new(Seen {
            conn_credit: AtomicI64::new(65_535),
            ..Seen::default()
        });
        if read {
            let input = out.try_clone().unwrap();
            let s = Arc::clone(&seen);
            std::thread::spawn(move || read_frames(input, &s));
        }
        Attacker {
            out,
            seen,
            opened: Instant::now(),
        }
    }

    /// Writes `bytes`; false once the server stopped taking them (closed, or a full
    /// window for longer than the write timeout).
    pub fn send(&mut self, bytes: &[u8]) -> bool {
        self.out.write_all(bytes).is_ok()
    }

    /// Waits until the server cut the connection, at most `limit`; how long it took.
    pub fn wait_cut(&self, limit: Duration) -> Option<Duration> {
        while self.opened.elapsed() < limit + Duration::from_secs(30) {
            if self.seen.cut() {
                return Some(self.opened.elapsed());
            }
            if self.opened.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

fn read_frames(mut input: TcpStream, seen: &Seen) {
    let mut head = [0u8; 9];
    let mut payload = Vec::new();
    loop {
        if input.read_exact(&mut head).is_err() {
            break;
        }
        let n = (head[0] as usize) << 16 | (head[1] as usize) << 8 | head[2] as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        payload.resize(n, 0);
        if input.read_exact(&mut payload).is_err() {
            break;
        }
        let word = |at: usize| {
            payload
                .get(at..at + 4)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        match kind {
            DATA => {
                seen.data_bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            HEADERS if stream != 0 => {
                seen.heads.fetch_add(1, Ordering::Relaxed);
            }
            RST_STREAM => {
                *seen.resets.lock().unwrap().entry(word(0)).or_default() += 1;
            }
            SETTINGS if flags & 1 == 1 => {
                seen.settings_acked.fetch_add(1, Ordering::Relaxed);
            }
            PING if flags & 1 == 1 => {
                seen.pings_acked.fetch_add(1, Ordering::Relaxed);
            }
            GOAWAY => {
                *seen.goaway.lock().unwrap() = Some(word(4));
            }
            WINDOW_UPDATE if stream == 0 => {
                seen.conn_credit
                    .fetch_add(word(0) as i64, Ordering::Relaxed);
            }
            _ => {}
        }
    }
    *seen.closed_at.lock().unwrap() = Some(Instant::now());
    seen.closed.store(true, Ordering::Relaxed);
}

/// The resident and peak resident memory of process `pid`, bytes.
pub fn rss(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU seconds (user and system) process `pid` has used.
pub fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}
