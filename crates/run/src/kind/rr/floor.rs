//! `--self-noise`: the tool's own floor, measured by the controller before the test: the
//! test's client loop (sizes, window, receive mode, its CPUs) against the test's echo in
//! this process over Unix socket pairs ([`sonde_engine::self_noise`]), no network.

use std::time::Duration;

use sonde_engine::self_noise::{self, NoisePlan};
use sonde_engine::Placement;
use sonde_results::document::SelfNoise;
use sonde_results::{LatencySummary, RrSpec, Transport};

use crate::kind::workers::poll_of;

/// The floor of `spec`'s loop over `ms`, its client workers placed as `placement`; or why
/// it could not be measured.
pub(super) fn measure(spec: &RrSpec, ms: u64, placement: Placement) -> Result<SelfNoise, String> {
    let datagram = spec.transport == Transport::Udp;
    let plan = NoisePlan {
        datagram,
        connections: spec.connections as usize,
        window: spec.window as usize,
        request_bytes: spec.request_bytes as usize,
        response_bytes: spec.response_bytes as usize,
        poll: poll_of(spec.poll),
        placement,
        duration: Duration::from_millis(ms),
    };
    let floor = self_noise::measure(&plan).map_err(|e| e.to_string())?;
    let latency = LatencySummary::of(&floor.histogram).ok_or("no round trip completed")?;
    Ok(SelfNoise {
        socket: if datagram {
            "unix_seqpacket"
        } else {
            "unix_stream"
        }
        .into(),
        seconds: floor.seconds,
        messages: latency.count,
        latency_ns: latency,
    })
}

#[cfg(test)]
mod tests {
    use super::super::RequestResponse;
    use crate::kind::Kind;
    use sonde_results::{RrSpec, TestSpec, Transport};

    #[test]
    fn the_kind_measures_the_floor_only_when_asked_over_the_tests_transport() {
        let ping = |transport, self_noise_ms| {
            TestSpec::Ping(RrSpec {
                transport,
                self_noise_ms,
                ..Default::default()
            })
        };
        assert!(RequestResponse
            .self_noise(&ping(Transport::Tcp, None))
            .is_none());
        for (transport, socket) in [
            (Transport::Tcp, "unix_stream"),
            (Transport::Udp, "unix_seqpacket"),
        ] {
            let floor = RequestResponse
                .self_noise(&ping(transport, Some(100)))
                .expect("asked for")
                .unwrap();
            assert_eq!((floor.socket.as_str(), floor.seconds), (socket, 0.1));
            let l = &floor.latency_ns;
            assert!(
                floor.messages > 10 && floor.messages == l.count,
                "{floor:?}"
            );
            assert!(l.p50 <= l.p999 && l.p999 <= l.max && l.histogram.is_some());
        }
    }
}
