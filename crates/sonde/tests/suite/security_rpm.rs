//! `serve --rpm` under its limits, attacked: 50 clients each holding a large download are
//! served while the 51st is refused by the connection limit, named in its answer and in
//! the server's log; then 50 silent clients (TCP open, nothing sent) and one that dribbles
//! its HTTP/2 preface fill every place, and the first-request deadline frees them all
//! within [`FIRST_REQUEST`] (3 s) so that a real client is served again. Loopback, h2c (the
//! deadlines are the same over TLS: the handshake is inside the first-request deadline).

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::rpm_end::Endpoint;
use common::Serial;
use sonde_rpm::client::conn::{self, Target};
use sonde_rpm::client::ClientError;
use sonde_rpm::config::Url;
use sonde_rpm::server::FIRST_REQUEST;

const LIMIT: usize = 50;

fn target(ep: &Endpoint) -> Target {
    Target {
        addr: format!("127.0.0.1:{}", ep.port()).parse().unwrap(),
        host: "127.0.0.1".into(),
        authority: format!("127.0.0.1:{}", ep.port()),
        tls: None,
    }
}

/// A 1-byte GET on a fresh connection: its round trip, or why not.
async fn probe(t: &Target) -> Result<f64, ClientError> {
    let small = Url::parse(&format!("http://{}/small", t.authority)).unwrap();
    let mut c = conn::open(t).await?;
    conn::timed_get(&mut c.sender, &small, &t.authority).await
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn fifty_clients_are_served_the_51st_refused_by_name_and_silent_ones_cannot_hold_it() {
    let _serial = Serial::take();
    let ep = Endpoint::start(
        None,
        "127.0.0.1",
        &[
            "--rpm-h2c",
            "--rpm-max-connections",
            "50",
            "--rpm-max-bitrate",
            "200M",
        ],
    );
    let t = target(&ep);
    let rt = runtime();
    let large = Url::parse(&format!("http://{}/large", t.authority)).unwrap();
    let counts: Vec<Arc<AtomicU64>> = (0..LIMIT).map(|_| Arc::new(AtomicU64::new(0))).collect();
    rt.block_on(async {
        let mut held = Vec::new();
        for n in &counts {
            let mut c = conn::open(&t).await.expect("one of the 50");
            let req = conn::request(http::Method::GET, &large, &t.authority, conn::empty());
            let body = conn::send(&mut c.sender, req)
                .await
                .expect("served")
                .into_body();
            let n = Arc::clone(n);
            held.push((c, tokio::spawn(read_all(body, n))));
        }
        // Every one of the 50 receives bytes; the 51st is refused, naming the limit.
        let refused = probe(&t).await;
        // A second: the 50 share 200 Mbit/s through one bucket, and this test's one
        // thread reads them all (on a machine at load 15, 300 ms left one unread).
        tokio::time::sleep(Duration::from_millis(1000)).await;
        for (i, c) in counts.iter().enumerate() {
            assert!(c.load(Ordering::Relaxed) > 0, "client {i} got nothing");
        }
        match refused {
            Err(ClientError::Status(_, 503, text)) => {
                assert!(text.contains("connection limit 50"), "{text}")
            }
            other => panic!("the 51st was not refused by the limit: {other:?}"),
        }
        for (c, task) in held {
            task.abort();
            drop(c);
        }
    });
    assert!(ep
        .log()
        .contains("connection limit 50 reached (--rpm-max-connections)"));

    // The places come back once the 50 leave.
    let left = Instant::now();
    while rt.block_on(probe(&t)).is_err() {
        assert!(
            left.elapsed() < Duration::from_secs(2),
            "places not given back: {}",
            ep.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("places given back {:?} after the 50 left", left.elapsed());
    // Silent clients fill every place, and one dribbles the preface a byte at a time.
    let addr = t.addr;
    let silent: Vec<TcpStream> = (0..LIMIT - 1)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    let dribbled = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        let start = Instant::now();
        for b in b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".iter().cycle() {
            if s.write_all(&[*b]).is_err() || start.elapsed() > Duration::from_secs(8) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        start.elapsed()
    });
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let while_held = rt.block_on(probe(&t));
    assert!(
        matches!(while_held, Err(ClientError::Status(_, 503, _))),
        "{while_held:?}: {}",
        ep.log()
    );
    // Each silent one is closed by the deadline: after the server's SETTINGS (and its
    // GOAWAY, if any) it reads its end of file.
    for mut s in silent {
        s.set_read_timeout(Some(FIRST_REQUEST + Duration::from_secs(2)))
            .unwrap();
        let mut b = [0u8; 256];
        let n = loop {
            match s.read(&mut b) {
                Ok(0) => break Ok(0),
                Ok(_) => continue,
                Err(e) => break Err(e),
            }
        };
        let reset = |e: &std::io::Error| e.kind() == std::io::ErrorKind::ConnectionReset;
        assert!(matches!(n, Ok(0)) || n.as_ref().is_err_and(reset), "{n:?}");
    }
    let freed_after = started.elapsed();
    let dribbled_for = dribbled.join().unwrap();
    assert!(
        dribbled_for < FIRST_REQUEST + Duration::from_secs(2),
        "held {dribbled_for:?}"
    );
    let served = rt.block_on(probe(&t));
    assert!(served.is_ok(), "{served:?}");
    eprintln!(
        "50 silent clients freed after {freed_after:?}; the dribbler cut after {dribbled_for:?}"
    );
    assert!(freed_after < FIRST_REQUEST + Duration::from_secs(1));
}

async fn read_all(mut body: hyper::body::Incoming, n: Arc<AtomicU64>) {
    use http_body_util::BodyExt;
    while let Some(Ok(frame)) = body.frame().await {
        if let Some(d) = frame.data_ref() {
            n.fetch_add(d.len() as u64, Ordering::Relaxed);
        }
    }
}
