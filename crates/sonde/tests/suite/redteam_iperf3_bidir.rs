//! Red team on `sonde serve --iperf3` serving UDP `--bidir`: a rogue iperf3 client agrees
//! a bidirectional test (one stream each way, 1000 datagrams a second of 100 bytes, 2 s),
//! takes our datagrams on its receiving stream, and floods its sending stream as fast as
//! it can (at most 400,000 datagrams or 3 s). Without the guard on the served receive our
//! receivers took the flood for the whole test; now the test is cut within a fraction of
//! a second: the client is told SERVER_ERROR with iperf3's rate error (27), the control
//! connection closes, and the served document's error names the agreement broken.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use common::*;

const COOKIE: &[u8; 37] = b"abcdefghijklmnopqrstuvwxyz234567bidi\0";

/// `sonde serve --iperf3 127.0.0.1:PORT` (loopback: allowed by default), listening, and
/// its stderr lines as they come.
fn serve(port: u16) -> (common::serve_proc::KillOnDrop, Receiver<String>) {
    let mut cmd = sonde_cmd();
    cmd.args(["serve", "--bind", "127.0.0.1", "--port", "0"])
        .args(["--iperf3", &format!("127.0.0.1:{port}")]);
    common::serve_proc::iperf3_lines(cmd)
}

/// One byte of the control connection, within 5 s.
fn state(c: &mut TcpStream) -> u8 {
    let mut b = [0u8; 1];
    c.read_exact(&mut b).unwrap();
    b[0]
}

/// A stream's UDP socket through iperf3's handshake with the server on `port`.
fn stream(port: u16) -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.send(b"9876").unwrap();
    let mut b = [0u8; 64];
    let n = s.recv(&mut b).unwrap();
    assert_eq!(&b[..n], b"6789", "the stream's reply");
    s
}

#[test]
fn a_bidir_client_flooding_its_stream_is_cut_and_named() {
    let _serial = Serial::take();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (_serve, lines) = serve(port);
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(COOKIE).unwrap();
    assert_eq!(state(&mut c), 9, "PARAM_EXCHANGE");
    let params = r#"{"udp":true,"time":2,"omit":0,"parallel":1,"len":100,"bandwidth":800000,"bidirectional":true}"#;
    c.write_all(&(params.len() as u32).to_be_bytes()).unwrap();
    c.write_all(params.as_bytes()).unwrap();
    assert_eq!(state(&mut c), 10, "CREATE_STREAMS");
    // The client's stream first, then ours (iperf3's order under --bidir).
    let (flood, _theirs) = (stream(port), stream(port));
    assert_eq!(
        (state(&mut c), state(&mut c)),
        (1, 2),
        "TEST_START, TEST_RUNNING"
    );
    c.set_nonblocking(true).unwrap();
    let start = Instant::now();
    let mut sent = 0u64;
    let mut told = Vec::new();
    let mut d = [0u8; 100];
    let cut = loop {
        if sent.is_multiple_of(256) {
            let mut b = [0u8; 64];
            match c.read(&mut b) {
                Ok(0) => break true,
                Ok(n) => told.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break true,
            }
        }
        if sent >= 400_000 || start.elapsed() > Duration::from_secs(3) {
            break false;
        }
        sent += 1;
        d[8..12].copy_from_slice(&(sent as u32).to_be_bytes());
        let _ = flood.send(&d);
    };
    let took = start.elapsed();
    eprintln!("flooded {sent} datagrams, cut {cut} after {took:?}, told {told:?}");
    assert!(
        cut,
        "the server never closed: it took the flood for the whole test"
    );
    // Cut early: well before the 2 s test's end (one-sided, a loaded host's margin).
    assert!(took < Duration::from_millis(1500), "{took:?}");
    // SERVER_ERROR (-2), then iperf3's error number 27 (the rate) and an errno of 0.
    assert_eq!(told.first(), Some(&0xfe), "{told:?}");
    assert_eq!(told.get(1..5), Some(&27i32.to_be_bytes()[..]), "{told:?}");
    let doc = std::iter::from_fn(|| lines.recv_timeout(Duration::from_secs(10)).ok())
        .find_map(|l| {
            let (_, json) = l.split_once("iperf3 document ")?;
            serde_json::from_str::<serde_json::Value>(json).ok()
        })
        .expect("the served test's document");
    let error = doc["end"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("broke what it agreed") && error.contains("over twice the 1000"),
        "{error}"
    );
    assert_eq!(doc["start"]["spec"]["bidir"], true, "{}", doc["start"]);
}
