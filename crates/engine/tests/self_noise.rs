//! The tool's floor over local socket pairs: round trips measured, every thread joined and
//! every descriptor closed. Its own test binary, so that no other test opens descriptors
//! or threads while they are counted.

use std::time::Duration;

use sonde_engine::self_noise::{measure, NoisePlan};
use sonde_engine::wait::Poll;
use sonde_engine::Placement;

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

#[test]
fn the_floor_over_stream_and_datagram_pairs_leaves_nothing_behind() {
    let (fds, threads) = (count("/proc/self/fd"), count("/proc/self/task"));
    for (datagram, poll, connections) in [
        (false, Poll::Block, 1),
        (true, Poll::Block, 1),
        (true, Poll::Busy, 1),
        (false, Poll::Block, 3),
    ] {
        let plan = NoisePlan {
            datagram,
            connections,
            window: 2,
            request_bytes: 64,
            response_bytes: 100,
            poll,
            placement: Placement::new(1, None, connections),
            echo_cpus: None,
            duration: Duration::from_millis(200),
        };
        let floor = measure(&plan).unwrap();
        let h = &floor.histogram;
        let what = format!("datagram {datagram}, {poll:?}, {connections} connection(s)");
        // Even a debug build makes thousands of local round trips in 200 ms.
        assert!(h.len() > 100, "{what}: {} round trips", h.len());
        let (p50, p999) = (h.value_at_quantile(0.5), h.value_at_quantile(0.999));
        assert!(
            h.min() > 0 && p50 <= p999 && p999 <= h.max(),
            "{what}: p50 {p50}, p99.9 {p999}, max {}",
            h.max()
        );
        assert_eq!(floor.seconds, 0.2);
        assert_eq!(
            count("/proc/self/fd"),
            fds,
            "{what}: a descriptor left open"
        );
        assert_eq!(
            count("/proc/self/task"),
            threads,
            "{what}: a thread left running"
        );
    }
}
