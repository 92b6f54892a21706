//! One `iperf3 -c -u` test served (forward, `-R` or `--bidir`, `-P`): the parameters
//! checked against the agent's limits, each stream accepted as iperf3's server accepts it
//! (a socket on the test's port takes the client's 4-byte datagram, connects to its
//! sender, a fresh socket takes the port for the next stream, and the 4-byte reply goes
//! back), then the packet-rate kind's receivers (or, reversed, senders; with `--bidir`
//! receivers on the client's streams and senders on ours) on those sockets speaking
//! iperf3's datagrams, what the client sends held to the rate and block it agreed
//! (`udp_guard`). A receiver's results are iperf3's own counts (lost, out of order,
//! jitter), so `iperf3 -c` prints what we measured. Only datagrams from the control
//! connection's address open a stream; every wait has a deadline.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::time::{Duration, Instant};

use sonde_engine::Placement;
use sonde_probe::hostwatch::HostProbe;
use sonde_proto::iperf3::server::refusal;
use sonde_proto::iperf3::{udp, Server, Test};
use sonde_results::spec::Timing;
use sonde_results::{Document, PollMode, PpsSpec, Role, TestSpec};

use super::client::Guard;
use super::config::Iperf3Config;
use super::conn::Control;
use super::serve_one::Opened;
use super::served::{io, setup_pass, ServeError};
use super::udp_plane::{self, Rx, Seen, Tx};
use super::{served, udp_figures, SERVE_WAIT};
use crate::kind::pps::{PpsSide, RxEngine, TxEngine};
use crate::side::Side;
use crate::signals::Interrupt;

/// iperf3's UDP block when the client gives none (`DEFAULT_UDP_BLKSIZE`).
const DEFAULT_UDP_BLOCK_BYTES: u32 = 1460;
/// Most packets a sender's call sends: about a millisecond of the test's rate, so that a
/// slow test's datagrams are spaced as iperf3 spaces its own.
const MAX_BATCH: f64 = 32.0;

/// The packet-rate spec this side runs for `t`: a flow per stream, the packet's size on
/// the wire from iperf3's block, its per-stream rate summed.
pub fn spec_of(t: &Test, ipv6: bool) -> PpsSpec {
    let len = match t.len_bytes {
        0 => DEFAULT_UDP_BLOCK_BYTES,
        l => l,
    };
    let headers = if ipv6 { 62 } else { 42 };
    let rate_pps = (t.rate_bits_per_s > 0)
        .then(|| t.rate_bits_per_s as f64 / (f64::from(len) * 8.0) * f64::from(t.streams));
    PpsSpec {
        size_bytes: len + headers,
        tx_threads: 1,
        rx_threads: t.streams,
        flows: t.streams,
        batch: rate_pps.map_or(MAX_BATCH, |r| (r / 1000.0).clamp(1.0, MAX_BATCH)) as u32,
        gso: false,
        rate_pps,
        timing: Timing {
            duration_ms: u64::from(t.duration_s) * 1000,
            warmup_ms: u64::from(t.omit_s) * 1000,
            cooldown_ms: 0,
            interval_ms: 1000,
        },
        poll: PollMode::Block,
        ipv6,
        bidir: t.bidir,
        ..PpsSpec::default()
    }
}

/// Why `p` is over `limits` or not served, with iperf3's error number for it; then every
/// other limit the agent holds its own tests to.
fn over_limits(p: &PpsSpec, limits: &crate::agent::Limits) -> Option<(i32, String)> {
    let refuse = |code, why: String| Some((code, why));
    let len = p.payload_bytes();
    if len > udp_plane::MAX_DATAGRAM_BYTES {
        let max = udp_plane::MAX_DATAGRAM_BYTES;
        return refuse(
            refusal::BAD_PARAMS,
            format!("-l {len}: at most {max} over UDP"),
        );
    }
    if p.size_bytes > limits.max_message_bytes {
        let max = limits.max_message_bytes;
        return refuse(
            refusal::UDP_BLOCK_SIZE,
            format!(
                "-l {len} bytes asked ({} with the headers), --max-message is {max}",
                p.size_bytes
            ),
        );
    }
    // Each receiver's batch of buffers, a datagram's most each.
    let memory = u64::from(p.flows) * u64::from(p.batch) * u64::from(udp_plane::MAX_DATAGRAM_BYTES);
    if memory > limits.max_memory_bytes {
        let max = limits.max_memory_bytes;
        return refuse(
            refusal::BAD_PARAMS,
            format!("{memory} bytes of buffers asked, --max-memory is {max}"),
        );
    }
    let ms = p.timing.total_ms();
    if ms > limits.max_duration_ms {
        let max = limits.max_duration_ms;
        return refuse(
            refusal::DURATION,
            format!("{ms} ms asked, --max-duration is {max} ms"),
        );
    }
    // --bidir: a receiver a stream of the client's and our sender, as the account books
    // them (the kind's demand); rates and bits each way, as --max-rate and --max-bitrate
    // read for every kind (a stream --bidir's too).
    let d = crate::kind::TypedKind::demand(&crate::kind::pps::Pps, p, Role::Server);
    let (streams, threads) = (d.connections, d.threads);
    if streams > limits.max_connections || threads > limits.max_threads {
        return refuse(
            refusal::STREAMS,
            format!(
                "{streams} streams asked, --max-connections is {} and --max-threads {}",
                limits.max_connections, limits.max_threads
            ),
        );
    }
    if let Some(max) = limits.max_rate {
        match p.rate_pps {
            Some(r) if r <= max => {}
            Some(r) => {
                return refuse(
                    refusal::RATE,
                    format!("{r:.0} datagrams/s asked, --max-rate is {max}"),
                )
            }
            None => {
                return refuse(
                    refusal::RATE,
                    format!("an unpaced test asked (-b 0), --max-rate is {max}"),
                )
            }
        }
    }
    if let Some(max) = limits.max_bitrate {
        let bits = p.rate_pps.map(|r| r * f64::from(p.size_bytes) * 8.0);
        match bits {
            Some(b) if b <= max => {}
            Some(b) => {
                return refuse(
                    refusal::RATE,
                    format!("{b} bit/s asked, --max-bitrate is {max}"),
                )
            }
            None => {
                return refuse(
                    refusal::RATE,
                    format!("an unpaced test asked (-b 0), --max-bitrate is {max}"),
                )
            }
        }
    }
    served::agent_limits(&TestSpec::Pps(p.clone()), limits)
}

/// A socket on the test's port beside those taken by its streams.
fn bind_port(local: SocketAddr) -> io::Result<UdpSocket> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(local),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    s.set_reuse_address(true)?;
    s.bind(&local.into())?;
    Ok(s.into())
}

/// Accepts the test's `n` UDP streams on `listening` (bound to `local`), from `client`
/// only, while the control connection may still fail; at most [`SERVE_WAIT`] in all.
fn streams(
    ctl: &mut Control,
    srv: &mut Server,
    mut listening: UdpSocket,
    local: SocketAddr,
    client: IpAddr,
    n: u32,
    stop: &Interrupt,
) -> Result<Vec<UdpSocket>, ServeError> {
    let until = Instant::now() + SERVE_WAIT;
    let mut out = Vec::new();
    let mut buf = [0u8; 64];
    while out.len() < n as usize {
        setup_pass(ctl, srv, until, "waiting for the UDP streams", stop)?;
        listening
            .set_read_timeout(Some(Duration::from_millis(50)))
            .map_err(io("UDP stream"))?;
        let from = match listening.recv_from(&mut buf) {
            // Another address's datagram opens no stream of this test.
            Ok((_, from)) if from.ip() == client => from,
            Ok(_) => continue,
            Err(e) if sonde_engine::wait::timed_out(&e) => continue,
            Err(e) => return Err(io("UDP stream")(e)),
        };
        listening.connect(from).map_err(io("UDP stream"))?;
        let next = bind_port(local).map_err(io("UDP stream"))?;
        listening.send(&udp::REPLY).map_err(io("UDP stream"))?;
        listening.set_read_timeout(None).map_err(io("UDP stream"))?;
        out.push(std::mem::replace(&mut listening, next));
    }
    Ok(out)
}

/// Serves the UDP test opened on `o`; its document and a summary.
pub(super) fn serve(
    o: Opened,
    listener: &TcpListener,
    cfg: &Iperf3Config,
    stop: &Interrupt,
) -> Result<(Document, String), ServeError> {
    let Opened {
        mut ctl,
        mut srv,
        test,
        peer,
        started_at,
        ..
    } = o;
    let local = listener.local_addr().map_err(io("listener"))?;
    let spec = spec_of(&test, local.is_ipv6());
    served::refuse_over(&mut ctl, &mut srv, over_limits(&spec, &cfg.limits))?;
    let _held = served::book(&mut ctl, &mut srv, cfg, &TestSpec::Pps(spec.clone()))?;
    let probe = HostProbe::for_peer(peer.ip());
    // Bound before CREATE_STREAMS: the first stream's datagram follows it at once.
    let first = bind_port(local).map_err(io("UDP stream"))?;
    srv.accept(Instant::now())?;
    let sockets = streams(
        &mut ctl,
        &mut srv,
        first,
        local,
        peer.ip(),
        test.connections(),
        stop,
    )?;
    let wire = udp_plane::wire(test.udp_64bit);
    let seen = Seen::default();
    let (mut side, guard) = workers(&spec, &test, sockets, (wire, &seen), (probe, peer, local))?;
    let total_ms = spec.timing.total_ms();
    let (intervals, ran) = served::run_test(
        &mut ctl,
        &mut srv,
        side.as_mut(),
        total_ms,
        (listener, guard),
        stop,
    )?;
    if !test.reverse {
        // What the client sent before its TEST_END, still queued, is read, not lost.
        std::thread::sleep(super::UDP_DRAIN);
    }
    let ours = side.into_result(ran.is_err());
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let mine = match test.bidir {
        true => udp_figures::our_results_bidir(&ours, &spec, &test, &seen),
        false => udp_figures::our_results(&ours, &spec, &test, &seen),
    };
    let (theirs, error) = served::their_results(&mut ctl, &mut srv, ran, &mine, &ours, true);
    let who = served::client_name(&test, peer);
    // The document's client is the sender: iperf3's, or ours under -R; with --bidir
    // iperf3's, its receiving the reverse direction.
    let far_role = if test.reverse {
        Role::Server
    } else {
        Role::Client
    };
    let far = theirs.as_ref().map(|r| match test.bidir {
        true => udp_figures::far_side_bidir(&spec, Role::Client, r, &who),
        false => udp_figures::far_side(&spec, far_role, r, &who),
    });
    let test_spec = TestSpec::Pps(spec);
    let summary =
        crate::kind::of(&test_spec).map_or_else(String::new, |k| k.summary(&test_spec, &ours));
    let (client, server, client_intervals, server_intervals) = match (test.reverse, &far) {
        (true, far) => (&ours, far.as_ref(), &intervals[..], &[][..]),
        (false, Some(far)) => (far, Some(&ours), &[][..], &intervals[..]),
        (false, None) => (&ours, None, &[][..], &intervals[..]),
    };
    let doc = served::document(
        cfg,
        &test_spec,
        (who, started_at),
        (client, server),
        (client_intervals, server_intervals),
        error,
    );
    Ok((doc, summary))
}

/// Our workers on the test's `sockets`, started: receivers for the client's streams,
/// senders for ours (`-R`), or both (`--bidir`: the client's streams first), as one side;
/// and the guard holding what the client sends to the rate and size it agreed.
fn workers(
    spec: &PpsSpec,
    test: &Test,
    mut sockets: Vec<UdpSocket>,
    (wire, seen): (sonde_engine::pps::Wire, &Seen),
    (probe, peer, local): (HostProbe, SocketAddr, SocketAddr),
) -> Result<(Box<dyn Side>, Option<Guard>), ServeError> {
    let flows = spec.flows as usize;
    let sending = |sockets, probe| -> Result<PpsSide, ServeError> {
        let mut tx = Tx::new(spec, wire, sockets);
        // The senders the account booked (the spec's, one).
        let placement = Placement::new(spec.tx_threads as usize, None, flows);
        tx.start(placement.clone(), 0)
            .map_err(io("starting the workers"))?;
        Ok(PpsSide::client(spec, Box::new(tx), placement, probe))
    };
    if test.reverse {
        return Ok((Box::new(sending(sockets, probe)?), None));
    }
    // Ours with the probe of their side, made before either side starts its clock: the
    // two sides' interval edges fall together.
    let ours = match test.bidir {
        true => Some((sockets.split_off(flows), HostProbe::for_peer(peer.ip()))),
        false => None,
    };
    let mut rx = Rx::new(spec, wire, sockets, seen.clone());
    rx.start(0).map_err(io("starting the workers"))?;
    let guard = guard_of(spec, &rx);
    let placement = Placement::new(flows, None, flows);
    let port = local.port();
    let receiving = PpsSide::server(spec, Box::new(rx), port, placement, probe, Vec::new());
    let Some((ours, their_probe)) = ours else {
        return Ok((Box::new(receiving), guard));
    };
    let sender = sending(ours, their_probe)?;
    let both = super::udp_bidir::Bidir::new(receiving, sender, Duration::ZERO);
    Ok((Box::new(both), guard))
}

/// What the peer sends us held to its agreement (a client served here, or the server of
/// our `-R`/`--bidir`): the rate over all its streams (its -b each) and its block (-l).
/// None for an unpaced test (-b 0), which agreed no rate.
pub(super) fn guard_of(spec: &PpsSpec, rx: &Rx) -> Option<Guard> {
    let (rate_pps, counts) = (spec.rate_pps?, rx.live_counts()?);
    let agreed = super::udp_guard::Agreed {
        rate_pps,
        payload_bytes: u64::from(spec.payload_bytes()),
        start: Instant::now(),
    };
    Some(Box::new(move |now| agreed.broken(now, counts.counts())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_iperf3_udp_test_becomes_a_pps_spec_of_its_rate() {
        let p = sonde_proto::iperf3::Params {
            udp: Some(true),
            parallel: Some(2.0),
            len: Some(1000.0),
            bandwidth: Some(8e6),
            time: Some(3.0),
            ..Default::default()
        };
        let s = spec_of(&p.test().unwrap(), false);
        assert_eq!((s.size_bytes, s.flows, s.payload_bytes()), (1042, 2, 1000));
        // 8 Mbit/s of 1000-byte blocks per stream: 1000 packets/s each.
        assert_eq!(s.rate_pps, Some(2000.0));
        assert_eq!(s.batch, 2);
        assert_eq!(s.timing.duration_ms, 3000);
    }

    /// The serving side's share of the agent's account for `iperf3 -c -u -P 2` at 8 Mbit/s
    /// a stream, `--bidir` or not.
    fn served_demand(bidir: bool) -> crate::kind::Demand {
        let p = sonde_proto::iperf3::Params {
            udp: Some(true),
            parallel: Some(2.0),
            len: Some(1000.0),
            bandwidth: Some(8e6),
            bidirectional: bidir.then_some(true),
            ..Default::default()
        };
        let spec = TestSpec::Pps(spec_of(&p.test().unwrap(), false));
        crate::kind::of(&spec).unwrap().demand(&spec, Role::Server)
    }

    /// A served `--bidir` test books both directions in the agent's account, as a sonde
    /// stream `--bidir` books both directions' connections: the receivers of the
    /// client's streams and the sender of ours, with their streams and memory. Beside it
    /// under `--max-threads 4` a test of 2 workers is refused, naming the 3 it holds (2
    /// receivers and our sender); one direction alone holds its 2 receivers, and the same
    /// test fits beside it.
    #[test]
    fn a_served_bidir_test_books_both_directions() {
        let (one, both) = (served_demand(false), served_demand(true));
        assert_eq!((one.threads, one.connections), (2, 2));
        assert_eq!((both.threads, both.connections), (3, 4));
        // Our sender's stack, batch and socket beside the receivers'.
        assert!(
            both.memory_bytes > one.memory_bytes + (2 << 20),
            "{both:?} {one:?}"
        );
        // Each way's rate, as a stream --bidir's (what --max-rate and --max-bitrate read,
        // for the agent's own tests and served ones).
        assert_eq!((both.rate, both.bits_per_s), (one.rate, one.bits_per_s));
        let account = std::sync::Arc::new(crate::agent::Account::default());
        let max_bytes = 1 << 40;
        let held = account.book_serving(&both, 4, max_bytes).unwrap();
        let e = account
            .book_serving(&one, 4, max_bytes)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "2 worker threads beside 3 of running tests, over this agent's --max-threads of 4"
            ),
            "{e}"
        );
        drop(held);
        let _one = account.book_serving(&one, 4, max_bytes).unwrap();
        let _beside = account.book_serving(&one, 4, max_bytes).unwrap();
    }

    /// `--max-rate` holds the datagrams a second each way (a `--bidir` test's two ways
    /// apart, as the agent's own tests'), and `--max-message` the datagram with its
    /// headers.
    #[test]
    fn the_datagram_rate_and_size_are_held_to_the_agents_limits() {
        let limits = crate::agent::Limits {
            max_rate: Some(1500.0),
            max_message_bytes: 1024,
            ..crate::agent::Limits::default()
        };
        let over = |len: f64, bits: f64, bidir: bool| {
            let p = sonde_proto::iperf3::Params {
                udp: Some(true),
                len: Some(len),
                bandwidth: Some(bits),
                bidirectional: bidir.then_some(true),
                ..Default::default()
            };
            let t = p.test().unwrap();
            over_limits(&spec_of(&t, false), &limits)
        };
        // 1000 datagrams a second of 900 bytes, one way or each way: within both.
        assert_eq!(over(900.0, 7.2e6, false), None);
        assert_eq!(over(900.0, 7.2e6, true), None);
        let (code, why) = over(900.0, 14.4e6, true).unwrap();
        assert_eq!(code, refusal::RATE);
        assert!(
            why.contains("2000 datagrams/s asked, --max-rate is 1500"),
            "{why}"
        );
        let (code, why) = over(1000.0, 8e6, false).unwrap();
        assert_eq!(code, refusal::UDP_BLOCK_SIZE);
        assert!(why.contains("--max-message is 1024"), "{why}");
    }
}
