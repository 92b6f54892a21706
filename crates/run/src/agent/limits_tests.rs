//! Limits against hostile specs: every kind and part, each refusal naming its flag.

use sonde_results::{PpsSpec, Role, RrSpec, StreamSpec, TestSpec, Timing};

use super::Limits;
use crate::kind;

fn check(limits: &Limits, spec: &TestSpec, role: Role) -> Option<String> {
    limits.check(spec, kind::of(spec).unwrap(), role)
}

fn capped() -> Limits {
    Limits {
        max_bitrate: Some(1e8),
        max_threads: 16,
        max_memory_bytes: 256 << 20,
        ..Limits::default()
    }
}

#[test]
fn every_kind_is_under_the_bit_rate() {
    let l = capped();
    let stream = |rate| {
        TestSpec::Stream(StreamSpec {
            rate_bits_per_s: rate,
            ..Default::default()
        })
    };
    let e = check(&l, &stream(None), Role::Server).unwrap();
    assert!(e.contains("--max-bitrate") && e.contains("--rate"), "{e}");
    assert!(check(&l, &stream(Some(1e9)), Role::Server)
        .unwrap()
        .contains("--max-bitrate"));
    assert_eq!(check(&l, &stream(Some(5e7)), Role::Server), None);
    let rpc = TestSpec::Rpc(RrSpec {
        rate_per_s: Some(1e6),
        ..Default::default()
    });
    assert!(check(&l, &rpc, Role::Server)
        .unwrap()
        .contains("--max-bitrate"));
    let pps = TestSpec::Pps(PpsSpec::default());
    assert!(check(&l, &pps, Role::Client)
        .unwrap()
        .contains("--max-bitrate"));
}

#[test]
fn a_client_part_is_paced_at_the_cap_or_refused_above_it() {
    let l = Limits::default();
    let mut s = TestSpec::Stream(StreamSpec::default());
    l.pace_client_part(&mut s);
    let TestSpec::Stream(st) = &s else {
        unreachable!()
    };
    assert_eq!(st.rate_bits_per_s, Some(super::DEFAULT_CLIENT_BITS_PER_S));
    assert_eq!(check(&l, &s, Role::Client), None);
    s.validate().unwrap();
    let fast = TestSpec::Stream(StreamSpec {
        rate_bits_per_s: Some(1e10),
        ..Default::default()
    });
    assert!(check(&l, &fast, Role::Client)
        .unwrap()
        .contains("--max-client-bitrate"));
    // The serving part is not a client part.
    assert_eq!(check(&l, &fast, Role::Server), None);
    let mut pps = TestSpec::Pps(PpsSpec::default());
    l.pace_client_part(&mut pps);
    assert_eq!(check(&l, &pps, Role::Client), None);
    pps.validate().unwrap();
    let mut rpc = TestSpec::Rpc(RrSpec::default());
    l.pace_client_part(&mut rpc);
    assert_eq!(check(&l, &rpc, Role::Client), None);
    rpc.validate().unwrap();
}

#[test]
fn threads_memory_hooks_and_huge_durations_are_refused() {
    let l = capped();
    let threads = TestSpec::Rpc(RrSpec {
        connections: 1024,
        server_threads: Some(1024),
        rate_per_s: Some(10.0),
        ..Default::default()
    });
    assert!(check(&l, &threads, Role::Server)
        .unwrap()
        .contains("--max-threads"));
    let memory = TestSpec::Pps(PpsSpec {
        rx_threads: 16,
        rate_pps: Some(10.0),
        ..Default::default()
    });
    assert!(check(&l, &memory, Role::Server)
        .unwrap()
        .contains("--max-memory"));
    let stall = TestSpec::Rpc(RrSpec {
        rate_per_s: Some(10.0),
        server_stall: Some(sonde_results::Stall {
            after_ms: 0,
            stall_ms: u64::MAX,
        }),
        ..Default::default()
    });
    assert!(check(&l, &stall, Role::Server)
        .unwrap()
        .contains("--test-hooks"));
    let hooks = Limits {
        test_hooks: true,
        ..capped()
    };
    assert_eq!(check(&hooks, &stall, Role::Server), None);
    let endless = TestSpec::Stream(StreamSpec {
        timing: Timing {
            duration_ms: u64::MAX,
            warmup_ms: u64::MAX,
            cooldown_ms: u64::MAX,
            interval_ms: 0,
        },
        connections: u32::MAX,
        rate_bits_per_s: Some(1.0),
        ..Default::default()
    });
    assert!(check(&l, &endless, Role::Server)
        .unwrap()
        .contains("--max-duration"));
    assert!(endless.validate().is_err());
}

fn udp_rpc(request_bytes: u32, response_bytes: u32) -> TestSpec {
    TestSpec::Rpc(RrSpec {
        transport: sonde_results::Transport::Udp,
        request_bytes,
        response_bytes,
        ..Default::default()
    })
}

#[test]
fn udp_answers_larger_than_their_request_need_the_agents_ratio() {
    let d = Limits::default();
    assert_eq!(check(&d, &udp_rpc(64, 64), Role::Server), None);
    assert_eq!(check(&d, &udp_rpc(1024, 64), Role::Server), None);
    let why = check(&d, &udp_rpc(16, 65_000), Role::Server).expect("refused");
    assert!(why.contains("--max-udp-reply-ratio 4063"), "{why}");
    // TCP answers go only to a connection that proved the cookie: not a reflector.
    let tcp = TestSpec::Rpc(RrSpec {
        response_bytes: 65_000,
        ..Default::default()
    });
    assert_eq!(check(&d, &tcp, Role::Server), None);
    let ratio = Limits {
        max_udp_reply_ratio: 16.0,
        ..Default::default()
    };
    assert_eq!(check(&ratio, &udp_rpc(64, 1024), Role::Server), None);
    assert!(check(&ratio, &udp_rpc(64, 1025), Role::Server).is_some());
}

#[test]
fn a_closed_loop_udp_client_part_is_bounded_by_what_it_sends_unanswered() {
    let l = Limits::default();
    let udp = |connections, window| {
        TestSpec::Rpc(RrSpec {
            transport: sonde_results::Transport::Udp,
            connections,
            window,
            request_bytes: 1400,
            ..Default::default()
        })
    };
    // 256 x 4096 x 1,400 B a second, unanswered: 11.7 Tbit/s.
    let why = check(&l, &udp(256, 4096), Role::Client).expect("refused");
    assert!(why.contains("--max-client-bitrate"), "{why}");
    // A ping's one request a second, or rpc -C 32 -W 8, is far under 1 Gbit/s.
    assert_eq!(check(&l, &udp(1, 1), Role::Client), None);
    assert_eq!(check(&l, &udp(32, 8), Role::Client), None);
    // Serving, the agent only answers.
    assert_eq!(check(&l, &udp(256, 4096), Role::Server), None);
}

/// What a client part books of the agent-wide `--max-client-bitrate`: a paced part its
/// rate, a closed-loop UDP one what it re-sends unanswered, a closed-loop TCP one nothing.
#[test]
fn a_client_part_books_its_rate_or_what_it_sends_unanswered() {
    let l = Limits::default();
    let books = |mut spec: TestSpec| {
        l.pace_client_part(&mut spec);
        let d = kind::of(&spec).unwrap().demand(&spec, Role::Client);
        l.client_bits(&spec, &d)
    };
    let pps = TestSpec::Pps(PpsSpec {
        rate_pps: Some(1000.0),
        size_bytes: 1000,
        ..Default::default()
    });
    assert_eq!(books(pps), 8e6);
    // Unpaced, a stream is paced at the whole cap and books it.
    assert_eq!(books(TestSpec::Stream(StreamSpec::default())), 1e9);
    let rr = |transport| RrSpec {
        transport,
        connections: 2,
        window: 4,
        request_bytes: 1000,
        ..Default::default()
    };
    let timeout = crate::kind::rr::UDP_LOSS_TIMEOUT.as_secs_f64();
    let udp = books(TestSpec::Rpc(rr(sonde_results::Transport::Udp)));
    assert_eq!(udp, 2.0 * 4.0 * 1000.0 * 8.0 / timeout);
    assert_eq!(books(TestSpec::Rpc(rr(sonde_results::Transport::Tcp))), 0.0);
}

#[test]
fn a_stamp_run_is_under_every_limit_of_a_client_part() {
    use super::{stamp_demand, MAX_STAMP_INTERVALS};
    let run = |rate: f64, bytes: u32, secs: u64| sonde_results::StampSpec {
        host: "198.18.0.3".into(),
        port: 862,
        rate_per_s: rate,
        count: None,
        packet_bytes: bytes,
        authenticated: false,
        stateful: false,
        ssid: 0,
        timeout_ms: 1_000,
        timing: Timing {
            duration_ms: secs * 1_000,
            warmup_ms: 0,
            cooldown_ms: 0,
            interval_ms: 1_000,
        },
        execution: Default::default(),
    };
    let check = |l: &Limits, s: &sonde_results::StampSpec| l.check_stamp(s, &stamp_demand(s));
    let l = Limits {
        max_rate: Some(1_000.0),
        max_duration_ms: 60_000,
        max_message_bytes: 1_500,
        ..Limits::default()
    };
    assert_eq!(check(&l, &run(1_000.0, 52, 59)), None);
    let e = check(&l, &run(1_001.0, 52, 10)).unwrap();
    assert!(e.contains("--max-rate of 1000"), "{e}");
    // The wait for the last answers counts: 59 s + 1 s is the limit, 60 s + 1 s is over.
    let e = check(&l, &run(10.0, 52, 60)).unwrap();
    assert!(e.contains("61.0 s") && e.contains("--max-duration"), "{e}");
    let e = check(&l, &run(10.0, 9_000, 10)).unwrap();
    assert!(e.contains("--max-message of 1500"), "{e}");
    // 100k packets/s of 9000 bytes: 7.2 Gbit/s, over the default client cap.
    let e = check(&Limits::default(), &run(1e5, 9_000, 10)).unwrap();
    assert!(e.contains("--max-client-bitrate"), "{e}");
    let mut many = run(10.0, 52, 3_000);
    many.timing.interval_ms = 100;
    let e = check(&Limits::default(), &many).unwrap();
    assert!(
        e.contains(&format!("the {MAX_STAMP_INTERVALS} a STAMP run")),
        "{e}"
    );
    // A long run's ledger is under --max-memory: 3,600 histograms.
    let small = Limits {
        max_memory_bytes: 64 << 20,
        ..Limits::default()
    };
    let e = check(&small, &run(10.0, 52, 3_590)).unwrap();
    assert!(e.contains("--max-memory"), "{e}");
}
