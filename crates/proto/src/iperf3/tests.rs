//! Both ends in memory against each other, and the far end misbehaving.

use std::time::{Duration, Instant};

use super::server::refusal;
use super::*;

const WAIT: Duration = Duration::from_secs(5);

fn test() -> Test {
    Params {
        tcp: Some(true),
        time: Some(3.0),
        parallel: Some(4.0),
        bidirectional: Some(true),
        len: Some(131072.0),
        ..Params::default()
    }
    .test()
    .unwrap()
}

fn cookie() -> Cookie {
    Cookie::from_random(&[7; COOKIE_BYTES - 1])
}

/// Moves every queued byte both ways until neither has anything to say.
fn pump(c: &mut Client, s: &mut Server, now: Instant) {
    loop {
        let mut moved = false;
        while let Some(b) = c.poll_transmit() {
            s.handle_bytes(&b, now).unwrap();
            moved = true;
        }
        while let Some(b) = s.poll_transmit() {
            c.handle_bytes(&b, now).unwrap();
            moved = true;
        }
        if !moved {
            return;
        }
    }
}

fn results(bytes: u64) -> Results {
    Results {
        cpu_util_total: 1.5,
        sender_has_retransmits: 1,
        streams: vec![StreamResults {
            id: 1,
            bytes,
            retransmits: 2,
            end_time: 3.0,
            ..StreamResults::default()
        }],
        ..Results::default()
    }
}

#[test]
fn a_whole_test_between_both_ends() {
    let t0 = Instant::now();
    let mut c = Client::new(cookie(), test(), t0, WAIT);
    let mut s = Server::new(t0, WAIT);
    pump(&mut c, &mut s, t0);
    assert_eq!(s.poll_event(), Some(ServerEvent::Cookie(cookie())));
    let Some(ServerEvent::Params(t)) = s.poll_event() else {
        panic!("no parameters")
    };
    assert_eq!(*t, test());
    assert_eq!(t.connections(), 8);
    s.accept(t0).unwrap();
    pump(&mut c, &mut s, t0);
    assert_eq!(c.poll_event(), Some(ClientEvent::CreateStreams));
    s.start(Duration::from_secs(10), t0).unwrap();
    pump(&mut c, &mut s, t0);
    assert_eq!(c.poll_event(), Some(ClientEvent::TestStart));
    assert_eq!(c.poll_event(), Some(ClientEvent::Running));
    assert_eq!(
        c.deadline(),
        None,
        "no deadline of the client's own while the test runs"
    );
    c.end(t0).unwrap();
    pump(&mut c, &mut s, t0);
    assert_eq!(s.poll_event(), Some(ServerEvent::TestEnd));
    s.exchange(t0).unwrap();
    pump(&mut c, &mut s, t0);
    assert_eq!(c.poll_event(), Some(ClientEvent::ExchangeResults));
    c.send_results(&results(100), t0).unwrap();
    pump(&mut c, &mut s, t0);
    assert_eq!(
        s.poll_event(),
        Some(ServerEvent::ClientResults(Box::new(results(100))))
    );
    s.send_results(&results(99), t0).unwrap();
    pump(&mut c, &mut s, t0);
    assert_eq!(
        c.poll_event(),
        Some(ClientEvent::ServerResults(Box::new(results(99))))
    );
    assert_eq!(c.poll_event(), Some(ClientEvent::Done));
    assert!(c.is_done());
    assert_eq!(s.poll_event(), Some(ServerEvent::Done));
    assert!(s.is_done());
}

#[test]
fn state_bytes_are_iperf3s() {
    assert_eq!(State::ParamExchange.byte(), 9);
    assert_eq!(State::AccessDenied.byte(), 0xff);
    assert_eq!(State::ServerError.byte(), 0xfe);
    for b in 0..=255u8 {
        if let Some(s) = State::from_byte(b) {
            assert_eq!(s.byte(), b);
        }
    }
    assert_eq!((stream_id(0), stream_id(1), stream_id(2)), (1, 3, 4));
    assert_eq!(stream_index(stream_id(7)), Some(7));
    assert_eq!(stream_index(2), None);
}

#[test]
fn a_busy_server_is_named() {
    let t0 = Instant::now();
    let mut c = Client::new(cookie(), test(), t0, WAIT);
    assert_eq!(c.handle_bytes(&[0xff], t0), Err(Iperf3Error::AccessDenied));
}

#[test]
fn a_server_error_carries_its_codes() {
    let t0 = Instant::now();
    let mut c = Client::new(cookie(), test(), t0, WAIT);
    c.handle_bytes(&[9], t0).unwrap();
    let mut s = Server::new(t0, WAIT);
    s.refuse(refusal::DURATION);
    let mut err = None;
    while let Some(b) = s.poll_transmit() {
        if let Err(e) = c.handle_bytes(&b, t0) {
            err = Some(e);
        }
    }
    let e = err.unwrap();
    assert_eq!(e, Iperf3Error::ServerError { code: 37, errno: 0 });
    assert!(
        e.to_string().contains("longer than the server allows"),
        "{e}"
    );
}

/// iperf3's server refusing a test's authentication sends SERVER_ERROR and IEAUTHTEST
/// without an errno, and closes: named as the refusal it is, not as a close.
#[test]
fn an_authentication_refusal_without_errno_is_named() {
    let t0 = Instant::now();
    let mut c = Client::new(cookie(), test(), t0, WAIT);
    c.handle_bytes(&[9, 0xfe, 0, 0, 0], t0).unwrap();
    // A close before the error number is whole is a close.
    let mut short = Client::new(cookie(), test(), t0, WAIT);
    short.handle_bytes(&[9, 0xfe, 0, 0, 0], t0).unwrap();
    assert!(matches!(short.handle_eof(), Err(Iperf3Error::Closed(_))));
    c.handle_bytes(&[142], t0).unwrap();
    let e = c.handle_eof().unwrap_err();
    assert_eq!(
        e,
        Iperf3Error::ServerError {
            code: 142,
            errno: 0
        }
    );
    assert!(
        e.to_string().contains("requires iperf3 authentication"),
        "{e}"
    );
}

/// The token goes with the parameters, where iperf3's server reads it.
#[test]
fn an_authtoken_is_sent_with_the_parameters() {
    let t0 = Instant::now();
    let mut c = Client::new(cookie(), test(), t0, WAIT).with_authtoken(Some("AAAA".into()));
    assert_eq!(c.poll_transmit(), Some(cookie().0.to_vec()));
    c.handle_bytes(&[9], t0).unwrap();
    let frame = c.poll_transmit().unwrap();
    let params: Params = serde_json::from_slice(&frame[4..]).unwrap();
    assert_eq!(params.authtoken.as_deref(), Some("AAAA"));
    assert_eq!(
        Params {
            authtoken: None,
            ..params
        },
        test().params()
    );
}

#[test]
fn a_state_out_of_order_is_refused_by_both() {
    let t0 = Instant::now();
    let mut c = Client::new(cookie(), test(), t0, WAIT);
    // TEST_RUNNING before PARAM_EXCHANGE.
    assert!(matches!(
        c.handle_bytes(&[2], t0),
        Err(Iperf3Error::UnexpectedState { byte: 2, .. })
    ));
    let mut s = Server::new(t0, WAIT);
    s.handle_bytes(&cookie().0, t0).unwrap();
    let params = super::frame::encode_json(&test().params());
    s.handle_bytes(&params, t0).unwrap();
    s.accept(t0).unwrap();
    // TEST_END before the streams are even started.
    assert!(matches!(
        s.handle_bytes(&[4], t0),
        Err(Iperf3Error::UnexpectedState { byte: 4, .. })
    ));
}

#[test]
fn lengths_are_checked_before_buffering() {
    let t0 = Instant::now();
    let mut s = Server::new(t0, WAIT);
    s.handle_bytes(&cookie().0, t0).unwrap();
    let e = s.handle_bytes(&u32::MAX.to_be_bytes(), t0).unwrap_err();
    assert_eq!(
        e,
        Iperf3Error::TooLong {
            what: "parameters",
            bytes: u32::MAX,
            max: PARAMS_MAX_BYTES
        }
    );
    let mut s = Server::new(t0, WAIT);
    s.handle_bytes(&cookie().0, t0).unwrap();
    assert_eq!(
        s.handle_bytes(&[0, 0, 0, 0], t0),
        Err(Iperf3Error::Empty("parameters"))
    );
}

#[test]
fn silence_ends_every_wait() {
    let t0 = Instant::now();
    let mut s = Server::new(t0, WAIT);
    s.handle_bytes(&cookie().0[..10], t0).unwrap();
    assert_eq!(s.deadline(), Some(t0 + WAIT));
    assert!(matches!(
        s.handle_timeout(t0 + WAIT),
        Err(Iperf3Error::Timeout { .. })
    ));
    let mut c = Client::new(cookie(), test(), t0, WAIT);
    assert!(c.handle_timeout(t0 + WAIT / 2).is_ok());
    assert!(matches!(
        c.handle_timeout(t0 + WAIT),
        Err(Iperf3Error::Timeout { .. })
    ));
}

#[test]
fn parameters_out_of_range_or_unserved_are_refused_by_name() {
    let bad = |p: Params| p.test().unwrap_err().to_string();
    let e = bad(Params {
        parallel: Some(129.0),
        ..Params::default()
    });
    assert!(e.contains("parallel (-P)"), "{e}");
    let e = bad(Params {
        time: Some(1.5),
        ..Params::default()
    });
    assert!(e.contains("time (-t)"), "{e}");
    let e = bad(Params {
        authtoken: Some("x".into()),
        ..Params::default()
    });
    assert!(e.contains("RSA authentication"), "{e}");
    let e = bad(Params {
        num: Some(1e6),
        ..Params::default()
    });
    assert!(e.contains("-n"), "{e}");
    let e = bad(Params {
        congestion: Some("../../etc".into()),
        ..Params::default()
    });
    assert!(e.contains("congestion"), "{e}");
    let e = bad(Params {
        udp: Some(true),
        len: Some(8.0),
        ..Params::default()
    });
    assert!(e.contains("len (-l)"), "{e}");
}

#[test]
fn iperf3s_own_parameters_are_read() {
    // As iperf 3.12 sends them for `-c X -u -b 10M -l 1000 -t 2 -R -P 2 --get-server-output`.
    let text = br#"{"udp":true,"omit":0,"time":2,"num":0,"blockcount":0,"parallel":2,"reverse":true,"len":1000,"bandwidth":10000000,"pacing_timer":1000,"get_server_output":1,"client_version":"3.12"}"#;
    let p: Params = serde_json::from_slice(text).unwrap();
    let t = p.test().unwrap();
    assert_eq!(t.protocol, Protocol::Udp);
    assert_eq!((t.streams, t.reverse, t.bidir), (2, true, false));
    assert_eq!(
        (t.duration_s, t.len_bytes, t.rate_bits_per_s),
        (2, 1000, 10_000_000)
    );
    assert!(t.get_server_output);
    assert_eq!(t.client_version.as_deref(), Some("3.12"));
}

#[test]
fn results_with_duplicate_ids_or_too_many_streams_are_refused() {
    let mut r = results(1);
    r.streams.push(r.streams[0].clone());
    assert!(r.checked().is_err());
    let mut r = results(1);
    r.streams = vec![StreamResults::default(); 257];
    assert!(r.checked().is_err());
    let mut r = results(1);
    r.server_output_text = Some("Server listening\niperf 3.12 (cJSON 1.7.15)\n".into());
    assert_eq!(r.server_version().as_deref(), Some("iperf 3.12"));
}

#[test]
fn udp_header_and_handshake() {
    let h = udp::Header {
        sec: 1,
        usec: 2,
        seq: (1 << 32) + 3,
    };
    let mut buf = [0u8; 16];
    assert!(h.write(&mut buf, true));
    assert_eq!(udp::Header::read(&buf, true), Some(h));
    assert!(h.write(&mut buf, false));
    assert_eq!(&buf[..12], &[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3]);
    assert_eq!(udp::Header::read(&buf[..11], false), None);
    assert!(udp::is_reply(b"6789"));
    assert!(udp::is_reply(&987_654_321u32.to_le_bytes()));
    assert!(!udp::is_reply(b"9876"));
}

#[test]
fn results_as_iperf3_prints_them_are_read() {
    // iperf 3.12's server results of a one-stream receiving test: retransmits is -1 cast
    // to unsigned, bytes a large integral double.
    let text = br#"{"cpu_util_total":1.2,"cpu_util_user":0.1,"cpu_util_system":1.1,"sender_has_retransmits":18446744073709551615,"streams":[{"id":1,"bytes":4.080465321e+9,"retransmits":18446744073709551615,"jitter":0,"errors":0,"omitted_errors":0,"packets":0,"omitted_packets":0,"start_time":0,"end_time":2.038268}]}"#;
    let r: Results = serde_json::from_slice(text).unwrap();
    let r = r.checked().unwrap();
    assert_eq!(r.sender_has_retransmits, -1);
    assert_eq!(r.streams[0].bytes, 4_080_465_321);
    assert_eq!(r.streams[0].retransmits, -1);
}

#[test]
fn a_negative_or_huge_byte_count_is_refused_not_read_as_zero() {
    for bytes in ["-5", "1e19", "-1"] {
        let text = format!(
            r#"{{"cpu_util_total":1,"cpu_util_user":0,"cpu_util_system":1,"sender_has_retransmits":1,"streams":[{{"id":1,"bytes":{bytes},"retransmits":0,"jitter":0,"errors":0,"packets":0}}]}}"#
        );
        let e = serde_json::from_str::<Results>(&text).unwrap_err();
        assert!(
            e.to_string().contains("negative or past 2^63"),
            "{bytes}: {e}"
        );
    }
    // A number past f64's range is no JSON number serde reads: refused too.
    let text = r#"{"cpu_util_total":1e999,"cpu_util_user":0,"cpu_util_system":1,"sender_has_retransmits":1,"streams":[]}"#;
    assert!(serde_json::from_str::<Results>(text).is_err());
}

#[test]
fn a_server_dribbling_each_state_just_in_time_has_one_wait_for_the_whole_setup() {
    let t0 = Instant::now();
    let wait = Duration::from_secs(10);
    let mut c = Client::new(cookie(), Params::default().test().unwrap(), t0, wait);
    // Each state 9 s after the last: no single wait is over, the setup is.
    c.handle_bytes(&[9], t0 + Duration::from_secs(9)).unwrap();
    assert_eq!(c.deadline(), Some(t0 + wait));
    let e = c.handle_timeout(t0 + wait).unwrap_err();
    assert!(
        matches!(e, Iperf3Error::Timeout { doing, .. } if doing.contains("CREATE_STREAMS")),
        "{e:?}"
    );
}
