//! Red team on `sonde stream/pps --iperf3` against a rogue iperf3 server, and on `sonde
//! serve --iperf3`'s waiting room against a crowd from one network.
//!
//! - Forged results: a server that runs the whole protocol but sends back results with a
//!   byte count far beyond what we sent (1e18), a negative one, a number past f64's range,
//!   a CPU of 1e300 %, or a time span of 1e12 s. None of its figures may reach the
//!   document: the far side is left out and the error names the server. Before the fix
//!   1e18 bytes became the receiver's figure (4e18 bit/s), and -5 a silent 0.
//! - A dribbled setup: a server answering each UDP stream's connect datagram 4 s late (each
//!   under the 10 s a step may take). Before the fix each stream had its own 10 s, so four
//!   streams and a never-sent TEST_START held the client 26 s; now the whole setup has one.
//! - One network's crowd: 24 silent connections from 24 addresses of 127.0.1.0/24, each
//!   replaced when closed, must not starve a real `iperf3 -c` from 127.0.2.0/24. Before the
//!   fix turns went by address: 24 never-served addresses queued first, 3 s each.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::iperf3_rogue::{agreed, frame, send_frame};
use common::*;

/// A rogue iperf3 server for one TCP test of one stream: the protocol as iperf3 runs it,
/// with `forged` as its results.
fn rogue_results(forged: String) -> (u16, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (mut c, _) = agreed(&l, Duration::from_secs(10));
        let (mut d, _) = l.accept().unwrap();
        d.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        std::thread::spawn(move || {
            let mut b = vec![0u8; 1 << 16];
            while matches!(d.read(&mut b), Ok(n) if n > 0) {}
        });
        c.write_all(&[1, 2]).unwrap();
        let mut b = [0u8; 1];
        while c.read_exact(&mut b).is_ok() && b[0] != 4 {}
        c.write_all(&[13]).unwrap();
        frame(&mut c);
        send_frame(&mut c, &forged);
        c.write_all(&[14]).unwrap();
        let _ = c.read(&mut b);
    });
    (port, t)
}

fn results(stream: &str, cpu: &str) -> String {
    format!(
        r#"{{"cpu_util_total":{cpu},"cpu_util_user":0,"cpu_util_system":1,"sender_has_retransmits":-1,"streams":[{{"id":1,{stream},"retransmits":-1,"jitter":0,"errors":0,"packets":0}}]}}"#
    )
}

#[test]
fn a_rogue_servers_forged_results_never_reach_the_document() {
    let _serial = Serial::take();
    let honest = r#""bytes":1000,"start_time":0,"end_time":1"#;
    for (what, forged) in [
        (
            "1e18 bytes",
            results(r#""bytes":1e18,"start_time":0,"end_time":1"#, "1"),
        ),
        (
            "-5 bytes",
            results(r#""bytes":-5,"start_time":0,"end_time":1"#, "1"),
        ),
        (
            "1e999 bytes",
            results(r#""bytes":1e999,"start_time":0,"end_time":1"#, "1"),
        ),
        ("1e300 % CPU", results(honest, "1e300")),
        (
            "1e12 s",
            results(r#""bytes":1000,"start_time":0,"end_time":1e12"#, "1"),
        ),
    ] {
        let (port, rogue) = rogue_results(forged);
        let t = Instant::now();
        let o = sonde_cmd()
            .args(["stream", "127.0.0.1", "--iperf3", "-p", &port.to_string()])
            .args(["-P", "1", "-t", "1", "--warmup", "0", "--json", "--no-save"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        rogue.join().unwrap();
        // Refused figures are the run's error: non-zero exit, the document still printed.
        assert!(!o.status.success(), "{what}: {}", stderr(&o));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{what}: {e}: {}{}", stdout(&o), stderr(&o)));
        let end = &doc["end"];
        eprintln!("{what}: {} in {:?}", end["error"], t.elapsed());
        assert!(end["receiver"].is_null(), "{what}: {}", end["receiver"]);
        let error = end["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(&format!("iperf3 server at 127.0.0.1:{port}")),
            "{what}: {error}"
        );
        // Our side stands: what we sent, measured here.
        assert!(end["sender"]["bytes"].as_u64().unwrap() > 0, "{what}");
        // No figure carries it (the error quotes what it refused).
        let mut figures = doc.clone();
        figures["end"]["error"] = serde_json::Value::Null;
        let text = figures.to_string();
        for forged in [
            "1000000000000000000",
            "1e18",
            "1e+18",
            "1e300",
            "1e+300",
            "1e12",
        ] {
            assert!(!text.contains(forged), "{what}: {forged} in the document");
        }
    }
}

#[test]
fn a_server_dribbling_udp_handshakes_is_cut_at_one_setup_wait() {
    let _serial = Serial::take();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let udp = UdpSocket::bind(("127.0.0.1", port)).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let stop = done.clone();
    let rogue = std::thread::spawn(move || {
        let _control = agreed(&l, Duration::from_secs(30));
        // Each stream's connect answered 4 s late, one after the other; never TEST_START.
        udp.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut b = [0u8; 64];
        let mut answered = 0;
        while answered < 4 && !stop.load(Ordering::Relaxed) {
            let Ok((_, from)) = udp.recv_from(&mut b) else {
                continue;
            };
            let at = Instant::now();
            while at.elapsed() < Duration::from_secs(4) && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = udp.send_to(b"6789", from);
            answered += 1;
        }
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let t = Instant::now();
    let o = sonde_cmd()
        .args(["pps", "127.0.0.1", "--iperf3", "-p", &port.to_string()])
        .args([
            "--flows",
            "4",
            "--rate",
            "1000",
            "-t",
            "1",
            "--warmup",
            "0",
            "--no-save",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = t.elapsed();
    done.store(true, Ordering::Relaxed);
    rogue.join().unwrap();
    let err = stderr(&o);
    eprintln!("cut after {took:?}: {err}");
    assert!(!o.status.success());
    assert!(
        err.contains(&format!("iperf3 server at 127.0.0.1:{port}")) && err.contains("UDP stream"),
        "{err}"
    );
    // One 10 s wait for the whole setup (a one-sided margin of 2 s for a loaded host);
    // a wait per stream took 26 s.
    assert!(took < Duration::from_secs(12), "cut after {took:?}");
}

#[test]
fn many_addresses_of_one_network_cannot_starve_another_network() {
    let Some((_serial, port, server)) = common::serve_proc::iperf3_loopback_test() else {
        return;
    };
    let to: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let stop = Arc::new(AtomicBool::new(false));
    let halt = stop.clone();
    // 24 addresses of 127.0.1.0/24, a silent connection each, replaced when closed (at
    // most 400 in all, 20 s).
    let crowd = std::thread::spawn(move || {
        let connect = |k: u8| {
            let s = connect_from([127, 0, 1, k], to).unwrap();
            s.set_nonblocking(true).unwrap();
            s
        };
        let mut held: Vec<TcpStream> = (1..=24).map(connect).collect();
        let (mut opened, start) = (24, Instant::now());
        while !halt.load(Ordering::Relaxed)
            && start.elapsed() < Duration::from_secs(20)
            && opened < 400
        {
            for (k, s) in held.iter_mut().enumerate() {
                if common::serve_proc::iperf3_closed(s) {
                    *s = connect(k as u8 + 1);
                    opened += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        opened
    });
    std::thread::sleep(Duration::from_millis(300));
    let limit = Duration::from_secs(15);
    let (took, opened) = common::serve_proc::iperf3_served_beside(
        port,
        ("127.0.2.1", limit),
        (&stop, crowd, "one network's crowd"),
        server,
    );
    // One of the crowd's turns (3 s) ahead of it at most, then its own 1 s test (3.7 s
    // measured); a one-sided margin for a loaded machine. Turns and room by address: not
    // served in 15 s; turns by address but room by network: 9.8 s.
    assert!(took < Duration::from_secs(8), "served after {took:?}");
    eprintln!("served after {took:?}; the crowd opened {opened} connections");
}

/// Against `serve --iperf3`, a UDP test's data phase: a stranger's connect datagram (from
/// 127.0.3.3, not the control connection's address) opens no stream and gets no reply; the
/// client's own does; a client that then never opens its second stream is cut at the 3 s
/// wait, and a real `iperf3 -c -u` is served afterwards.
#[test]
fn serve_iperf3_opens_udp_streams_only_for_the_client_and_in_time() {
    let Some((_serial, port, mut server)) = common::serve_proc::iperf3_loopback_test() else {
        return;
    };
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"abcdefghijklmnopqrstuvwxyz234567abcd\0")
        .unwrap();
    let mut b = [0u8; 1];
    c.read_exact(&mut b).unwrap();
    assert_eq!(b[0], 9, "PARAM_EXCHANGE");
    send_frame(
        &mut c,
        r#"{"udp":true,"parallel":2,"time":1,"len":100,"bandwidth":80000}"#,
    );
    c.read_exact(&mut b).unwrap();
    assert_eq!(b[0], 10, "CREATE_STREAMS");
    let asked = Instant::now();
    let to = ("127.0.0.1", port);
    let stranger = UdpSocket::bind("127.0.3.3:0").unwrap();
    stranger.send_to(b"9876", to).unwrap();
    stranger
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut r = [0u8; 16];
    assert!(
        stranger.recv_from(&mut r).is_err(),
        "a stranger's datagram was answered"
    );
    let ours = UdpSocket::bind("127.0.0.1:0").unwrap();
    ours.send_to(b"9876", to).unwrap();
    ours.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let (n, _) = ours
        .recv_from(&mut r)
        .expect("the client's stream answered");
    assert_eq!(&r[..n], b"6789");
    // The second stream never comes: the control connection is closed at the 3 s wait.
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    let cut = asked.elapsed();
    eprintln!("cut after {cut:?}");
    assert!(
        cut >= Duration::from_millis(2900) && cut < Duration::from_millis(4500),
        "{cut:?}"
    );
    let real = std::process::Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &port.to_string(), "-u", "-b", "1M"])
        .args(["-t", "1", "-J"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(real.success(), "iperf3 -c -u after the attack: {real}");
}
