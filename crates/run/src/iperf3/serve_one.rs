//! One `iperf3 -c` test served, from its cookie to IPERF_DONE: the parameters checked
//! against the agent's limits (refused with iperf3's own error numbers, which its client
//! names), the data connections accepted on the same port (each must carry the test's
//! cookie; any other connection meanwhile is told ACCESS_DENIED), the stream kind's
//! workers run over them, and both results exchanged. Every wait has a deadline.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use sonde_probe::hostwatch::HostProbe;
use sonde_proto::iperf3::server::refusal;
use sonde_proto::iperf3::{Cookie, Iperf3Error, Server, ServerEvent, Test, COOKIE_BYTES};
use sonde_results::spec::Timing;
use sonde_results::{Direction, Document, Role, StreamSpec, TestSpec};

use super::config::Iperf3Config;
use super::conn::{accept_within, Control};
use super::served::{self, io, setup_pass, turn, ServeError};
use super::{figures, SERVE_WAIT};
use crate::controller::now_rfc3339;
use crate::signals::Interrupt;

/// iperf3's TCP block when the client gives none (`DEFAULT_TCP_BLKSIZE`).
const DEFAULT_TCP_BLOCK_BYTES: u32 = 128 * 1024;
/// How long a new data connection may take to send its cookie.
const COOKIE_WAIT: Duration = Duration::from_secs(2);

/// The stream spec this side runs for `t`.
pub fn spec_of(t: &Test) -> StreamSpec {
    let direction = match (t.bidir, t.reverse) {
        (true, _) => Direction::Bidir,
        (false, true) => Direction::Reverse,
        (false, false) => Direction::Forward,
    };
    StreamSpec {
        connections: t.streams,
        timing: Timing {
            duration_ms: u64::from(t.duration_s) * 1000,
            warmup_ms: u64::from(t.omit_s) * 1000,
            cooldown_ms: 0,
            interval_ms: 1000,
        },
        buffer_bytes: match t.len_bytes {
            0 => DEFAULT_TCP_BLOCK_BYTES,
            l => l,
        },
        direction,
        congestion: t.congestion.clone(),
        sndbuf_bytes: t.window_bytes,
        rcvbuf_bytes: t.window_bytes,
        rate_bits_per_s: (t.rate_bits_per_s > 0)
            .then_some(t.rate_bits_per_s as f64 * f64::from(t.streams)),
        ..StreamSpec::default()
    }
}

/// Why `spec` is over `limits`, with iperf3's error number for it: the limits iperf3 has
/// a number for first, then every other limit the agent holds its own tests to (memory
/// with `-w`'s socket buffers, worker threads), as the agent words them.
fn over_limits(spec: &StreamSpec, limits: &crate::agent::Limits) -> Option<(i32, String)> {
    let ms = spec.timing.total_ms();
    if ms > limits.max_duration_ms {
        return Some((
            refusal::DURATION,
            format!(
                "{ms} ms asked, --max-duration is {} ms",
                limits.max_duration_ms
            ),
        ));
    }
    let conns = spec.total_connections();
    if conns > limits.max_connections {
        return Some((
            refusal::STREAMS,
            format!(
                "{conns} connections asked, --max-connections is {}",
                limits.max_connections
            ),
        ));
    }
    // The stream kind's workers for them, as the agent counts its own tests'.
    let whole = TestSpec::Stream(spec.clone());
    let threads =
        crate::kind::of(&whole).map_or(conns as usize, |k| k.workers(&whole, Role::Server));
    if threads > limits.max_threads {
        return Some((
            refusal::STREAMS,
            format!(
                "{threads} worker threads for {conns} connections, --max-threads is {}",
                limits.max_threads
            ),
        ));
    }
    if spec.buffer_bytes > limits.max_message_bytes {
        return Some((
            refusal::BLOCK_SIZE,
            format!(
                "-l {} bytes asked, --max-message is {}",
                spec.buffer_bytes, limits.max_message_bytes
            ),
        ));
    }
    if let Some(max) = limits.max_bitrate {
        match spec.rate_bits_per_s {
            Some(r) if r <= max => {}
            Some(r) => {
                return Some((
                    refusal::RATE,
                    format!("{r} bit/s asked each way, --max-bitrate is {max}"),
                ))
            }
            None => {
                return Some((
                    refusal::RATE,
                    format!("an unpaced test asked (no -b), --max-bitrate is {max}"),
                ))
            }
        }
    }
    served::agent_limits(&whole, limits)
}

/// Accepts the test's `n` data connections, each with `cookie`; tells any other
/// connection ACCESS_DENIED; fails when the control connection fails or time is up.
fn data_connections(
    listener: &TcpListener,
    ctl: &mut Control,
    srv: &mut Server,
    cookie: Cookie,
    n: u32,
    stop: &Interrupt,
) -> Result<Vec<TcpStream>, ServeError> {
    let until = Instant::now() + SERVE_WAIT;
    let mut conns = Vec::new();
    while conns.len() < n as usize {
        setup_pass(ctl, srv, until, "waiting for the data connections", stop)?;
        let Some((mut s, _)) = accept_within(listener) else {
            continue;
        };
        let mut got = [0u8; COOKIE_BYTES];
        let read = s
            .set_read_timeout(Some(COOKIE_WAIT))
            .and_then(|_| s.read_exact(&mut got));
        if read.is_ok() && got == cookie.0 {
            s.set_read_timeout(None).map_err(io("data connection"))?;
            conns.push(s);
        } else {
            let _ = s.write_all(&[sonde_proto::iperf3::State::AccessDenied.byte()]);
        }
    }
    Ok(conns)
}

/// A control connection past its cookie and parameters: what the TCP and UDP tests
/// serve from.
pub(super) struct Opened {
    pub ctl: Control,
    pub srv: Server,
    pub cookie: Cookie,
    pub test: Test,
    pub peer: SocketAddr,
    pub started_at: String,
}

/// Reads the client's cookie and parameters from the control connection `stream`.
pub(super) fn open(
    stream: TcpStream,
    peer: SocketAddr,
    stop: &Interrupt,
) -> Result<Opened, ServeError> {
    let started_at = now_rfc3339();
    let mut ctl = Control::new(stream).map_err(io("control connection"))?;
    let mut srv = Server::new(Instant::now(), SERVE_WAIT);
    let (mut cookie, mut test) = (None, None);
    while test.is_none() {
        if stop.is_set() {
            return Err(ServeError::Stopped);
        }
        if let Err(e) = turn(&mut ctl, &mut srv, None) {
            // Parameters it cannot serve: told so with iperf3's number, which its client
            // names (authentication apart, as it asks for a feature and not a value).
            if let ServeError::Protocol(Iperf3Error::BadParams(why)) = &e {
                let auth = why.starts_with("RSA authentication");
                srv.refuse(if auth {
                    refusal::AUTH
                } else {
                    refusal::BAD_PARAMS
                });
                let _ = ctl.flush(|| srv.poll_transmit());
            }
            return Err(e);
        }
        while let Some(e) = srv.poll_event() {
            match e {
                ServerEvent::Cookie(c) => cookie = Some(c),
                ServerEvent::Params(t) => test = Some(*t),
                _ => {}
            }
        }
    }
    let (Some(cookie), Some(test)) = (cookie, test) else {
        return Err(ServeError::Refused("no parameters".into()));
    };
    Ok(Opened {
        ctl,
        srv,
        cookie,
        test,
        peer,
        started_at,
    })
}

/// Serves the TCP stream test of an opened control connection; its document and a
/// summary.
pub(super) fn serve_stream(
    o: Opened,
    listener: &TcpListener,
    cfg: &Iperf3Config,
    stop: &Interrupt,
) -> Result<(Document, String), ServeError> {
    let Opened {
        mut ctl,
        mut srv,
        cookie,
        test,
        peer,
        started_at,
    } = o;
    let spec = spec_of(&test);
    served::refuse_over(&mut ctl, &mut srv, over_limits(&spec, &cfg.limits))?;
    let whole = TestSpec::Stream(spec.clone());
    let _held = served::book(&mut ctl, &mut srv, cfg, &whole)?;
    // Before the test starts: probing the host takes a while, and the client sends (and
    // counts) from TEST_RUNNING on.
    let probe = HostProbe::for_peer(peer.ip());
    srv.accept(Instant::now())?;
    let conns = data_connections(
        listener,
        &mut ctl,
        &mut srv,
        cookie,
        test.connections(),
        stop,
    )?;
    // Our clock starts before the client's (it starts at TEST_START): our window ends
    // before its TEST_END comes.
    let mut side =
        crate::kind::stream::start_connected(&spec, Role::Server, conns, Vec::new(), probe)
            .map_err(io("starting the workers"))?;
    let total_ms = spec.timing.total_ms();
    let (intervals, ran) = served::run_test(
        &mut ctl,
        &mut srv,
        side.as_mut(),
        total_ms,
        (listener, None),
        stop,
    )?;
    let ours = side.into_result(ran.is_err());
    let mine = figures::our_results(&ours, &test);
    let (theirs, error) = served::their_results(&mut ctl, &mut srv, ran, &mine, &ours, false);
    let who = served::client_name(&test, peer);
    let far = theirs
        .as_ref()
        .map(|r| figures::far_side(&spec, Role::Client, r, &who));
    let summary = crate::kind::of(&TestSpec::Stream(spec.clone())).map_or_else(String::new, |k| {
        k.summary(&TestSpec::Stream(spec.clone()), &ours)
    });
    let spec = TestSpec::Stream(spec);
    let doc = served::document(
        cfg,
        &spec,
        (who, started_at),
        (far.as_ref().unwrap_or(&ours), far.as_ref().map(|_| &ours)),
        (&[], &intervals),
        error,
    );
    Ok((doc, summary))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Limits;
    use serde_json::{json, Value};

    /// The spec served for iperf3's parameters: 1 s, 32K writes, 10 Mbit/s, then `set`.
    fn spec(set: (&str, Value)) -> StreamSpec {
        let mut p = json!({ "time": 1, "len": 32768, "bandwidth": 1e7 });
        p[set.0] = set.1;
        let p: sonde_proto::iperf3::Params = serde_json::from_value(p).unwrap();
        spec_of(&p.test().unwrap())
    }

    /// A served TCP `--bidir` books both directions in the agent's account: the client's
    /// connections and ours, a worker each (what a served UDP `--bidir` now books too,
    /// `udp_serve`'s test).
    #[test]
    fn a_served_tcp_bidir_books_both_directions() {
        let demand = |bidir: bool| {
            let p = json!({ "time": 1, "len": 32768, "bandwidth": 1e7, "parallel": 2,
                            "bidirectional": bidir });
            let p: sonde_proto::iperf3::Params = serde_json::from_value(p).unwrap();
            let spec = TestSpec::Stream(spec_of(&p.test().unwrap()));
            let d = crate::kind::of(&spec).unwrap().demand(&spec, Role::Server);
            (d.threads, d.connections)
        };
        assert_eq!((demand(false), demand(true)), ((2, 2), (4, 4)));
    }

    /// Each limit alone refuses with iperf3's number for it and the flag's name.
    #[test]
    fn each_limit_refuses_with_its_iperf3_number_and_flag() {
        let limits = Limits {
            max_duration_ms: 2000,
            max_connections: 4,
            max_threads: 2,
            max_message_bytes: 64 << 10,
            max_memory_bytes: 64 << 20,
            max_bitrate: Some(50e6),
            ..Limits::default()
        };
        assert_eq!(over_limits(&spec(("parallel", json!(2))), &limits), None);
        for (set, code, flag) in [
            (("time", json!(3)), refusal::DURATION, "--max-duration"),
            (
                ("parallel", json!(5)),
                refusal::STREAMS,
                "--max-connections",
            ),
            (("parallel", json!(3)), refusal::STREAMS, "--max-threads"),
            (("len", json!(131072)), refusal::BLOCK_SIZE, "--max-message"),
            (
                ("window", json!(33554432)),
                refusal::BAD_PARAMS,
                "--max-memory",
            ),
            (("bandwidth", json!(6e7)), refusal::RATE, "--max-bitrate"),
            (("bandwidth", json!(0)), refusal::RATE, "--max-bitrate"),
        ] {
            let what = format!("{set:?}");
            let (c, why) = over_limits(&spec(set), &limits).unwrap_or_else(|| panic!("{what}"));
            assert_eq!(c, code, "{what}: {why}");
            assert!(why.contains(flag), "{what}: {why}");
        }
    }
}
