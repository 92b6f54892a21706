//! Both ends of iperf3's control protocol fed arbitrary bytes, whole and split in two: they
//! may refuse, but never panic, and never queue more than a bounded answer.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use sonde_proto::iperf3::{udp, Client, Cookie, Params, Server, COOKIE_BYTES};

fuzz_target!(|data: &[u8]| {
    let now = Instant::now();
    let wait = Duration::from_secs(5);
    let test = Params::default().test().unwrap();
    let split = data.first().map_or(0, |&b| usize::from(b)).min(data.len());
    for parts in [&[data][..], &[&data[..split], &data[split..]][..]] {
        let mut c = Client::new(Cookie([b'a'; COOKIE_BYTES]), test.clone(), now, wait);
        let mut s = Server::new(now, wait);
        for p in parts {
            let _ = c.handle_bytes(p, now);
            if s.handle_bytes(p, now).is_ok() {
                let _ = s.accept(now);
            }
        }
        let mut out = 0;
        while let Some(b) = s.poll_transmit() {
            out += b.len();
        }
        while let Some(b) = c.poll_transmit() {
            out += b.len();
        }
        assert!(out < 64 * 1024);
    }
    let _ = serde_json::from_slice::<Params>(data).map(|p| p.test());
    let _ = udp::Header::read(data, true);
    let _ = udp::is_reply(data);
});
