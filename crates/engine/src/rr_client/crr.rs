//! Connect per request (neper tcp_crr): connect, send, receive, close; each exchange timed
//! from before its connect.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::plan::WorkerEnd;
use super::recorder::Recorder;
use super::workers::{Core, COMPLETED, SENT};
use crate::sockopt::{self, SocketOptions};
use crate::wait::{self, Recv};

/// One connection per request: connect, send, receive, close; timed from before connect.
pub(super) fn run(
    shared: &Core,
    k: usize,
    addr: SocketAddr,
    opts: &SocketOptions,
    rec: &mut Recorder<'_>,
) -> WorkerEnd {
    let p = &shared.plan;
    let counters = &shared.counters[k];
    let mut end = WorkerEnd::default();
    let mut buf = vec![0x5au8; p.request_bytes.max(p.response_bytes)];
    while !shared.aborting.load(Ordering::Relaxed) && Instant::now() < p.stop_sending_at {
        let t0 = Instant::now();
        let (s, _) = match sockopt::connect(addr, opts, Duration::from_secs(2)) {
            Ok(x) => x,
            Err(e) => {
                end.error = Some(format!("connect: {e}"));
                break;
            }
        };
        counters.add_to(SENT, 1);
        let fd = s.as_raw_fd();
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        wait::send_blocking(fd, &buf, p.request_bytes);
        let mut got = 0;
        while got < p.response_bytes {
            match wait::recv(fd, &mut buf[..p.response_bytes - got], false) {
                Ok(Recv::Data(n)) => got += n,
                _ => break,
            }
        }
        drop(s);
        if got < p.response_bytes {
            end.unanswered += 1;
            end.error = Some("a connect-per-request exchange ended early".into());
            break;
        }
        rec.record(t0, Instant::now());
        counters.add_to(COMPLETED, 1);
    }
    end
}
