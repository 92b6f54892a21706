use super::*;
use std::net::TcpStream;

fn get(addr: SocketAddr, request: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn metrics_are_served_and_nothing_else() {
    let stop = Interrupt::none();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let (addr, handle) = serve(
        any,
        || "a 1\n# EOF\n".into(),
        Duration::ZERO,
        Access::default(),
        stop.clone(),
    )
    .unwrap();
    let ok = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
    assert!(
        ok.contains(request::CONTENT_TYPE) && ok.ends_with("a 1\n# EOF\n"),
        "{ok}"
    );
    assert!(get(addr, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(get(addr, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
    // A client that sends nothing holds no one up, and is dropped at the deadline.
    let mut silent = TcpStream::connect(addr).unwrap();
    let began = Instant::now();
    assert!(get(addr, "GET /metrics HTTP/1.0\r\n\r\n").contains("200 OK"));
    // Held by the silent client, the scrape would wait out its deadline: it must not
    // (an ordering, not a latency: the machine's other work may slow the scrape itself).
    assert!(began.elapsed() < REQUEST_DEADLINE, "{:?}", began.elapsed());
    silent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // Another test of this crate may signal the process: a read it interrupts goes on.
    let read = loop {
        match silent.read(&mut [0u8; 16]) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => break r.unwrap(),
        }
    };
    assert_eq!(read, 0, "closed by the server");
    let held = began.elapsed();
    assert!(
        held >= REQUEST_DEADLINE - Duration::from_millis(100)
            // Cut at the request deadline, not at the later close deadline (a loaded
            // machine may wake the server's poll late, so no tighter bound).
            && held < CLOSE_DEADLINE,
        "{held:?}"
    );
    let taken = serve(
        addr,
        String::new,
        Duration::ZERO,
        Access::default(),
        Interrupt::none(),
    )
    .unwrap_err()
    .to_string();
    assert!(taken.contains(&format!("--metrics {addr}")), "{taken}");
    stop.set();
    handle.join().unwrap();
}
