//! `sonde pps HOST --iperf3`: a packet-rate test against an `iperf3 -s` over UDP (its
//! `-u`): the control connection as for TCP ([`super::client::Session`]), each flow one
//! iperf3 stream whose socket opens with iperf3's connect handshake, and the pps kind's
//! senders writing iperf3's datagrams at the spec's rate. The server's receive counts
//! (its lost, its jitter) come back in its results and make the far side. Reversed
//! (`-R`), the server sends: the pps kind's receivers count on our side (iperf3's way too:
//! lost, out of order, jitter; every stream socket's drops), the server's results are its
//! sender's counts, and what it sends is held to what it agreed
//! ([`udp_guard`](super::udp_guard)). With `--bidir` both at once, each direction on its
//! own streams ([`udp_bidir`](super::udp_bidir)).

use sonde_engine::Placement;
use sonde_proto::iperf3::{Params, Protocol, Test};
use sonde_results::{Document, Engine, PpsSpec, Role};

use super::client::{Iperf3RunError, Session};
use super::{udp_bidir, udp_figures, udp_plane, udp_serve};
use crate::controller::{LiveInterval, TestRequest, SOFTWARE};
use crate::kind::pps::PpsSide;
use crate::signals::Interrupt;

/// The iperf3 UDP test `spec` asks for, or the flag iperf3 cannot carry.
pub fn test_of(spec: &PpsSpec) -> Result<Test, Iperf3RunError> {
    let refuse = |flag, reason: String| Iperf3RunError::Spec { flag, reason };
    let whole = |ms: u64, flag| match ms % 1000 {
        0 => Ok((ms / 1000) as f64),
        _ => Err(refuse(
            flag,
            format!("iperf3 counts whole seconds: {ms} ms is not one"),
        )),
    };
    if spec.execution.engine != Engine::Kernel {
        return Err(refuse(
            "--engine",
            "an iperf3 server is measured with kernel sockets only".into(),
        ));
    }
    if spec.gso {
        return Err(refuse(
            "--gso",
            "iperf3's datagrams are stamped one by one: no GSO".into(),
        ));
    }
    if spec.reverse && spec.bidir {
        return Err(refuse(
            "--bidir",
            "both ends send with --bidir: -R says only the server does".into(),
        ));
    }
    let payload = spec.payload_bytes();
    if !(sonde_proto::iperf3::MIN_UDP_BLOCK_BYTES..=udp_plane::MAX_DATAGRAM_BYTES)
        .contains(&payload)
    {
        return Err(refuse(
            "--size",
            format!(
                "{payload} bytes of UDP payload: iperf3 takes {} to {} here",
                sonde_proto::iperf3::MIN_UDP_BLOCK_BYTES,
                udp_plane::MAX_DATAGRAM_BYTES
            ),
        ));
    }
    let flows = f64::from(spec.flows.max(1));
    let params = Params {
        udp: Some(true),
        time: Some(whole(spec.timing.duration_ms, "--duration")?),
        omit: Some(whole(spec.timing.warmup_ms, "--warmup")?),
        parallel: Some(flows),
        len: Some(f64::from(payload)),
        // iperf3's -b is per stream, in payload bits; 0 is unlimited, as no --rate.
        bandwidth: Some(
            spec.rate_pps
                .map_or(0.0, |r| (r / flows * f64::from(payload) * 8.0).round()),
        ),
        reverse: spec.reverse.then_some(true),
        bidirectional: spec.bidir.then_some(true),
        get_server_output: Some(1.0),
        client_version: Some(SOFTWARE.into()),
        ..Params::default()
    };
    let mut t = params
        .test()
        .map_err(|e| refuse("--iperf3", e.to_string()))?;
    t.protocol = Protocol::Udp;
    Ok(t)
}

/// One packet-rate test against the iperf3 server at `req.host:req.port`.
pub fn run(
    req: &TestRequest,
    spec: &PpsSpec,
    auth: Option<&super::Iperf3Auth>,
    interrupt: &Interrupt,
    live: &mut dyn FnMut(LiveInterval<'_>),
) -> Result<Document, Iperf3RunError> {
    let test = test_of(spec)?;
    let mut s = Session::open(req, test.clone(), auth, interrupt)?;
    let addr = s.addr;
    let io = |what| move |source| Iperf3RunError::Io { addr, what, source };
    let tos = spec.execution.marks.data_tos();
    // One deadline for every stream's handshake: the setup's own.
    let until = s.setup_until();
    let sockets = (0..test.connections())
        .map(|_| udp_plane::connect(addr, tos, until))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io("UDP stream"))?;
    let wire = udp_plane::wire(test.udp_64bit);
    if spec.reverse {
        return receive(s, spec, &test, sockets, interrupt, live);
    }
    if spec.bidir {
        return both_ways(s, spec, &test, sockets, interrupt, live);
    }
    s.until_running(interrupt)?;
    let probe = s.probe.take().expect("probed once");
    let mut tx = udp_plane::Tx::new(spec, wire, sockets);
    let placement = Placement::new(
        spec.tx_threads as usize,
        spec.execution.client_cpus.clone(),
        spec.flows as usize,
    );
    crate::kind::pps::TxEngine::start(&mut tx, placement.clone(), 0)
        .map_err(io("starting the senders"))?;
    let side = Box::new(PpsSide::client(spec, Box::new(tx), placement, probe));
    Ok(s.finish(
        side,
        super::UDP_DRAIN,
        interrupt,
        live,
        |ours| udp_figures::our_results(ours, spec, &test, &[]),
        |theirs, who| udp_figures::far_side(spec, Role::Server, theirs, who),
    ))
}

/// Reversed: the server sends on `sockets` from TEST_RUNNING; our receivers count what
/// arrives, held to the rate and size agreed.
fn receive(
    mut s: Session<'_>,
    spec: &PpsSpec,
    test: &Test,
    sockets: Vec<std::net::UdpSocket>,
    interrupt: &Interrupt,
    live: &mut dyn FnMut(LiveInterval<'_>),
) -> Result<Document, Iperf3RunError> {
    let addr = s.addr;
    let io = |what| move |source| Iperf3RunError::Io { addr, what, source };
    let (mut rx, seen, port) = receivers(spec, test, sockets);
    s.ours = Role::Server;
    // The receivers start at TEST_RUNNING, when the server starts sending: what a rogue
    // sends before it waits in the sockets' buffers (bounded), unread, and then counts
    // against the agreement at once.
    s.until_running(interrupt)?;
    crate::kind::pps::RxEngine::start(&mut rx, 0).map_err(io("starting the receivers"))?;
    s.guard = udp_serve::guard_of(spec, &rx);
    let probe = s.probe.take().expect("probed once");
    let flows = spec.flows as usize;
    let placement = Placement::new(flows, None, flows);
    let side = PpsSide::server(spec, Box::new(rx), port, placement, probe, Vec::new());
    Ok(s.finish(
        Box::new(side),
        std::time::Duration::ZERO,
        interrupt,
        live,
        |ours| {
            let seen = seen.lock().map(|v| v.clone()).unwrap_or_default();
            udp_figures::our_results(ours, spec, test, &seen)
        },
        |theirs, who| udp_figures::far_side(spec, Role::Client, theirs, who),
    ))
}

/// `--bidir`: we send on the first half of the streams while the server sends on the
/// second, from TEST_RUNNING; our receivers held to the rate and size agreed, as under -R.
fn both_ways(
    mut s: Session<'_>,
    spec: &PpsSpec,
    test: &Test,
    mut sockets: Vec<std::net::UdpSocket>,
    interrupt: &Interrupt,
    live: &mut dyn FnMut(LiveInterval<'_>),
) -> Result<Document, Iperf3RunError> {
    let addr = s.addr;
    let io = |what| move |source| Iperf3RunError::Io { addr, what, source };
    let flows = spec.flows as usize;
    let (mut rx, seen, port) = receivers(spec, test, sockets.split_off(flows));
    let mut tx = udp_plane::Tx::new(spec, udp_plane::wire(test.udp_64bit), sockets);
    // Probed before the test, as the session's own probe: both sides' clocks then start
    // together at TEST_RUNNING.
    let rx_probe = sonde_probe::hostwatch::HostProbe::for_peer(addr.ip());
    s.until_running(interrupt)?;
    let placement = Placement::new(
        spec.tx_threads as usize,
        spec.execution.client_cpus.clone(),
        flows,
    );
    crate::kind::pps::TxEngine::start(&mut tx, placement.clone(), 0)
        .map_err(io("starting the senders"))?;
    crate::kind::pps::RxEngine::start(&mut rx, 0).map_err(io("starting the receivers"))?;
    s.guard = udp_serve::guard_of(spec, &rx);
    let probe = s.probe.take().expect("probed once");
    let ours = PpsSide::client(spec, Box::new(tx), placement, probe);
    let rx_placement = Placement::new(flows, None, flows);
    let other = PpsSide::server(spec, Box::new(rx), port, rx_placement, rx_probe, Vec::new());
    // Our receivers read past our TEST_END, said a drain after our last datagram: what
    // the server sent before it heard it is still on the way.
    let linger = super::UDP_DRAIN + RX_LINGER;
    let side = udp_bidir::Bidir::new(ours, other, linger);
    Ok(s.finish(
        Box::new(side),
        super::UDP_DRAIN,
        interrupt,
        live,
        |ours| {
            let seen = seen.lock().map(|v| v.clone()).unwrap_or_default();
            udp_figures::our_results_bidir(ours, spec, test, &seen)
        },
        |theirs, who| udp_figures::far_side_bidir(spec, Role::Server, theirs, who),
    ))
}

/// Our receivers on the streams the server sends on, `sockets`; what they count per
/// stream (kept once they are joined); the first one's port, our side's in the document.
fn receivers(
    spec: &PpsSpec,
    test: &Test,
    sockets: Vec<std::net::UdpSocket>,
) -> (udp_plane::Rx, udp_plane::Seen, u16) {
    let port = sockets
        .first()
        .and_then(|s| s.local_addr().ok())
        .map_or(0, |a| a.port());
    let seen = udp_plane::Seen::default();
    let wire = udp_plane::wire(test.udp_64bit);
    let rx = udp_plane::Rx::new(spec, wire, sockets, seen.clone());
    (rx, seen, port)
}

/// After our TEST_END, how long our receivers of a `--bidir` test still read: the
/// server's last datagrams, sent before TEST_END reached it.
const RX_LINGER: std::time::Duration = std::time::Duration::from_millis(300);
