//! `--self-noise`: the tool's own floor, measured by the controller before the test: the
//! test's client loop (sizes, window, receive mode, its CPUs) against the test's echo in
//! this process over Unix socket pairs ([`sonde_engine::self_noise`]), no network.

use std::time::Duration;

use sonde_engine::affinity::current_mask;
use sonde_engine::self_noise::{self, NoisePlan};
use sonde_engine::wait::Poll;
use sonde_engine::Placement;
use sonde_results::document::{NoFloor, Prelude, RrPrelude, SelfNoise};
use sonde_results::{LatencySummary, RrSpec, Transport};

use crate::apart::free_of;
use crate::kind::seam::ClientAt;
use crate::kind::workers::poll_of;

/// rr's step before the test: the floor when the spec asks for it, measured here if the
/// client side runs here (`placement`: its workers'), or why not, for rr's section.
pub(super) fn prelude(
    spec: &RrSpec,
    client: ClientAt<'_>,
    placement: impl FnOnce() -> Placement,
) -> Option<Prelude> {
    let ms = spec.self_noise_ms?;
    let self_noise = match client {
        ClientAt::Here => measure(spec, ms, placement()),
        // The floor is this host's; the client side runs on another.
        ClientAt::Agent(at) => Err(NoFloor::ClientElsewhere(at.to_string())),
    };
    Some(Prelude::Rr(RrPrelude { self_noise }))
}

/// The floor of `spec`'s loop over `ms`, its client workers placed as `placement`; or why
/// it could not be measured.
pub(super) fn measure(spec: &RrSpec, ms: u64, placement: Placement) -> Result<SelfNoise, NoFloor> {
    let datagram = spec.transport == Transport::Udp;
    let poll = poll_of(spec.poll);
    let echo_cpus =
        echo_cpus(&placement, poll != Poll::Block).map_err(|()| NoFloor::SharedCpus {
            poll: spec.poll.label().to_string(),
        })?;
    let plan = NoisePlan {
        datagram,
        connections: spec.connections as usize,
        window: spec.window as usize,
        request_bytes: spec.request_bytes as usize,
        response_bytes: spec.response_bytes as usize,
        poll,
        placement,
        echo_cpus,
        duration: Duration::from_millis(ms),
    };
    let floor = self_noise::measure(&plan).map_err(|e| NoFloor::Failed(e.to_string()))?;
    let latency = LatencySummary::of(&floor.histogram).ok_or(NoFloor::NoRoundTrip)?;
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

/// Where the echo runs: the CPUs this process may use apart from the pinned client
/// workers' (the agent's echo has a host of its own); `None`: where the scheduler puts it.
/// `Err` when a spinning loop would leave its echo no CPU of its own: each would wait for
/// the other's time slice, and the floor would be the scheduler's.
fn echo_cpus(placement: &Placement, spins: bool) -> Result<Option<Vec<usize>>, ()> {
    let (free, room) = match free_of(placement) {
        Some(free) => {
            let room = !free.is_empty();
            (room.then_some(free), room)
        }
        None => (
            None,
            current_mask().unwrap_or_default().len() > placement.threads,
        ),
    };
    if spins && !room {
        return Err(());
    }
    Ok(free)
}

#[cfg(test)]
mod tests {
    use super::super::RequestResponse;
    use super::*;
    use crate::kind::TypedKind;
    use sonde_results::{RrSpec, Transport};

    #[test]
    fn the_echo_runs_apart_from_pinned_workers_and_a_spinning_loop_needs_room() {
        std::thread::spawn(|| {
            let mask = current_mask().unwrap();
            let all = Placement::new(mask.len(), Some(mask.clone()), mask.len());
            assert_eq!(echo_cpus(&all, false), Ok(None), "block: shares, as asked");
            assert_eq!(
                echo_cpus(&all, true),
                Err(()),
                "spinning with no CPU to spare"
            );
            if mask.len() >= 2 {
                let first = Placement::new(1, Some(vec![mask[0]]), 1);
                assert_eq!(echo_cpus(&first, true), Ok(Some(mask[1..].to_vec())));
                assert_eq!(echo_cpus(&Placement::new(1, None, 1), true), Ok(None));
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_kind_measures_the_floor_only_when_asked_here_over_the_tests_transport() {
        let ping = |transport, self_noise_ms| RrSpec {
            transport,
            self_noise_ms,
            ..Default::default()
        };
        let prelude = |spec: &RrSpec, at| {
            let Prelude::Rr(RrPrelude { self_noise }) = RequestResponse.prelude(spec, at)?;
            Some(self_noise)
        };
        assert_eq!(prelude(&ping(Transport::Tcp, None), ClientAt::Here), None);
        // A client side on another agent: no floor of this host, and why.
        assert_eq!(
            prelude(
                &ping(Transport::Tcp, Some(100)),
                ClientAt::Agent("198.18.0.1")
            ),
            Some(Err(NoFloor::ClientElsewhere("198.18.0.1".into())))
        );
        for (transport, socket) in [
            (Transport::Tcp, "unix_stream"),
            (Transport::Udp, "unix_seqpacket"),
        ] {
            let floor = prelude(&ping(transport, Some(100)), ClientAt::Here)
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
