//! `sonde fleet --every --metrics ADDR:PORT`: `GET /metrics` answered with the exporter's
//! OpenMetrics text. One thread takes one connection at a time (Prometheus scrapes a few
//! times a minute); a request line is read within a second and 8 KiB, so a slow or
//! endless client holds the thread no longer than that.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::Duration;

use sonde_report::openmetrics::CONTENT_TYPE;
use sonde_run::signals::Interrupt;

/// The most of a request the server reads: its request line and headers.
const MAX_REQUEST_BYTES: u64 = 8 << 10;
const READ_TIMEOUT: Duration = Duration::from_secs(1);

/// Listens on `addr` and serves `body()` at `/metrics` until `interrupt`; the error names
/// the address.
pub fn serve(
    addr: SocketAddr,
    body: impl Fn() -> String + Send + 'static,
    interrupt: Interrupt,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind(addr)
        .map_err(|e| anyhow::anyhow!("--metrics {addr}: cannot listen: {e}"))?;
    let local = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let handle = std::thread::spawn(move || {
        while !interrupt.is_set() {
            // Sleeps in poll until a client connects, waking twice a second to see the flag.
            if !readable(&listener, STOP_CHECK) {
                continue;
            }
            if let Ok((conn, _)) = listener.accept() {
                let _ = answer(conn, &body);
            }
        }
    });
    Ok((local, handle))
}

/// How often the serving thread looks at its stop flag while no client comes.
const STOP_CHECK: Duration = Duration::from_millis(500);

/// Whether a connection waits on `listener`, within `limit`.
fn readable(listener: &TcpListener, limit: Duration) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut p, 1, limit.as_millis() as libc::c_int) };
    n > 0 && p.revents & libc::POLLIN != 0
}

/// One request: `GET /metrics` gets the text, any other path 404, any other method 405.
fn answer(conn: TcpStream, body: &impl Fn() -> String) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(READ_TIMEOUT))?;
    conn.set_write_timeout(Some(READ_TIMEOUT * 5))?;
    let mut reader = BufReader::new((&conn).take(MAX_REQUEST_BYTES));
    let mut line = String::new();
    reader.read_line(&mut line)?;
    // The headers are read and dropped, so the client sees its whole request taken.
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (status, kind, text) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => ("200 OK", CONTENT_TYPE, body()),
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "only /metrics is served\n".into(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics\n".into(),
        ),
    };
    let mut out = &conn;
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn metrics_are_served_and_nothing_else() {
        let stop = Interrupt::none();
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let (addr, handle) = serve(any, || "a 1\n# EOF\n".into(), stop.clone()).unwrap();
        let ok = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains(CONTENT_TYPE) && ok.ends_with("a 1\n# EOF\n"),
            "{ok}"
        );
        assert!(get(addr, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(addr, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        // A client that sends nothing is dropped after the read timeout; the next is served.
        let _silent = TcpStream::connect(addr).unwrap();
        assert!(get(addr, "GET /metrics HTTP/1.0\r\n\r\n").contains("200 OK"));
        let taken = serve(addr, String::new, Interrupt::none())
            .unwrap_err()
            .to_string();
        assert!(taken.contains(&format!("--metrics {addr}")), "{taken}");
        stop.set();
        handle.join().unwrap();
    }
}
