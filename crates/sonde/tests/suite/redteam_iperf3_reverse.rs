//! Red team on `sonde pps --iperf3 -R`: a rogue iperf3 server that, once the reversed UDP
//! test is agreed (one stream, 1000 datagrams a second of 100 bytes), sends
//! - faster: as fast as it can (at most 400,000 datagrams or 3 s). Without the guard the
//!   receivers took every one for the whole test; now the test is cut within a fraction
//!   of a second, the error naming the server and the rate agreed;
//! - larger: 1400-byte datagrams at the agreed rate. Cut, naming the size agreed;
//! - from another port: the agreed rate from a socket other than the stream's (what a
//!   connected socket never takes), then results claiming it all arrived. Without the
//!   check the document showed a 100 % loss as the server's measurement; now the results
//!   are refused and the error names the server and the stream.
//!
//! Every run is bounded: the rogue stops on the client's close or its own bounds.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::iperf3_rogue::{agreed, frame, send_frame};
use common::*;

#[derive(Clone, Copy, Debug)]
enum Rogue {
    Faster,
    Larger,
    OtherPort,
}

/// One datagram of iperf3's: a time stamp and sequence number `seq`, `len` bytes.
fn datagram(seq: u32, len: usize) -> Vec<u8> {
    let mut d = vec![0u8; len];
    d[8..12].copy_from_slice(&seq.to_be_bytes());
    d
}

/// A rogue iperf3 server for one reversed UDP test of one stream, behaving as `how`;
/// returns its port and, when joined, the datagrams it sent.
fn rogue(how: Rogue) -> (u16, std::thread::JoinHandle<u64>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let udp = UdpSocket::bind(("127.0.0.1", port)).unwrap();
    let t = std::thread::spawn(move || {
        let (mut c, params) = agreed(&l, Duration::from_secs(10));
        assert!(params.contains("\"reverse\":true"), "{params}");
        udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 64];
        let (_, from) = udp.recv_from(&mut b).unwrap();
        udp.send_to(b"6789", from).unwrap();
        c.write_all(&[1, 2]).unwrap();
        let other = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (tx, len, pace): (&UdpSocket, usize, bool) = match how {
            Rogue::Faster => (&udp, 100, false),
            Rogue::Larger => (&udp, 1400, true),
            Rogue::OtherPort => (&other, 100, true),
        };
        c.set_nonblocking(true).unwrap();
        let start = Instant::now();
        let mut sent = 0u64;
        let mut ctl = [0u8; 64];
        // Until the client's TEST_END, CLIENT_TERMINATE or close, or the rogue's bounds.
        let ended = loop {
            match c.read(&mut ctl) {
                Ok(0) => break false,
                Ok(n) if ctl[..n].contains(&4) => break true,
                Ok(_) => break false,
                Err(_) => {}
            }
            if sent >= 400_000 || start.elapsed() > Duration::from_secs(3) {
                break false;
            }
            // Paced: 1000 a second, a datagram a millisecond.
            if pace && sent as f64 >= start.elapsed().as_secs_f64() * 1000.0 {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            if tx.send_to(&datagram(sent as u32 + 1, len), from).is_ok() {
                sent += 1;
            }
        };
        if ended {
            c.set_nonblocking(false).unwrap();
            c.write_all(&[13]).unwrap();
            frame(&mut c);
            let results = format!(
                r#"{{"cpu_util_total":1,"cpu_util_user":0,"cpu_util_system":1,"sender_has_retransmits":-1,"streams":[{{"id":1,"bytes":{},"retransmits":-1,"jitter":0,"errors":0,"packets":{sent},"start_time":0,"end_time":2}}]}}"#,
                sent * len as u64
            );
            send_frame(&mut c, &results);
            c.write_all(&[14]).unwrap();
            let _ = c.read(&mut ctl);
        }
        sent
    });
    (port, t)
}

#[test]
fn a_reverse_udp_server_breaking_the_agreement_is_cut_and_named() {
    let _serial = Serial::take();
    for (how, why) in [
        (Rogue::Faster, "over twice the 1000 a second agreed"),
        (Rogue::Larger, "longer than the 100 bytes agreed"),
        (Rogue::OtherPort, "none reached our socket"),
    ] {
        let (port, server) = rogue(how);
        let t = Instant::now();
        let o = sonde_cmd()
            .args([
                "pps",
                "127.0.0.1",
                "--iperf3",
                "-R",
                "-p",
                &port.to_string(),
            ])
            .args(["--flows", "1", "--rate", "1000", "--size", "142"])
            .args(["-t", "2", "--warmup", "0"])
            .args(["--json", "--no-save"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let took = t.elapsed();
        let sent = server.join().expect("the rogue ran its course");
        let err = stderr(&o);
        // The run's error: non-zero exit, the document still printed.
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{how:?}: {e}: {}{err}", stdout(&o)));
        let end = &doc["end"];
        // Our side only: with no far side it stands in the document's first place,
        // marked as the receiver ("server") it is.
        let ours = &end["packets"]["sender"];
        assert_eq!(ours["measured_by"], "server", "{how:?}: {ours}");
        assert!(end["packets"]["receiver"].is_null(), "{how:?}");
        let got = ours["total_packets"].as_u64();
        eprintln!(
            "{how:?}: it sent {sent}, we took {got:?} in {took:?}: {}",
            end["error"]
        );
        assert!(!o.status.success(), "{how:?}: {err}");
        let error = end["error"].as_str().unwrap_or_default();
        let at: SocketAddr = ([127, 0, 0, 1], port).into();
        assert!(
            error.contains(&format!("iperf3 server at {at}")),
            "{how:?}: {error}"
        );
        assert!(error.contains(why), "{how:?}: {error}");
        // Nothing of its results stands beside ours.
        let text = doc.to_string();
        assert!(
            !text.contains("\"host\":\"iperf3 server"),
            "{how:?}: {text}"
        );
        match how {
            // Cut early: well before the 2 s test's end (one-sided, a loaded host's
            // margin), having taken a bounded part of the flood: what arrives between
            // two looks of the guard (50 ms), not the rogue's 400,000.
            Rogue::Faster => {
                assert!(took < Duration::from_millis(1500), "{how:?}: {took:?}");
                assert!(got.unwrap() < 100_000, "{how:?}: took {got:?} of {sent}");
            }
            Rogue::Larger => assert!(took < Duration::from_millis(1500), "{took:?}"),
            Rogue::OtherPort => {
                assert_eq!(got, Some(0), "{how:?}");
                assert!(sent > 1000, "{how:?}: it sent {sent}");
            }
        }
    }
}
