//! The rpm verdict on plain numbers: each direction's loaded phase, its client TCP_INFO
//! and its round trips as a run records them.

use super::rpm::{judge_direction, loaded_tcp};
use super::Limit;
use crate::rpm::{Component, Confidence, Responsiveness, RpmDirection, RpmInterval};
use crate::side::Transfer;
use crate::tcp::TcpSample;

fn c(ms: f64) -> Component {
    Component {
        trimmed_mean_ms: ms,
        count: 10,
        kept: 9,
    }
}

/// A direction of `conns` connections at `mbit` whose self probes took `loaded_ms`, each
/// 0.5 s interval's samples from `sample(connection)`; the first interval unsaturated.
fn direction(
    conns: u32,
    mbit: f64,
    loaded_ms: f64,
    sample: impl Fn(u32) -> TcpSample,
) -> RpmDirection {
    let intervals = (1..=6)
        .map(|n| RpmInterval {
            end_s: n as f64 * 0.5,
            connections: conns,
            goodput_bits_per_second: mbit * 1e6,
            moving_goodput_bits_per_second: mbit * 1e6,
            moving_rpm: (n > 1).then_some(1000.0),
            probes: 10,
            // The slow-start interval's figures must not count.
            tcp: (0..conns)
                .map(|i| TcpSample {
                    connection: i,
                    ..sample(i)
                })
                .map(|s| match n {
                    1 => TcpSample {
                        retransmits: 1000,
                        rwnd_limited_percent: Some(100.0),
                        ..s
                    },
                    _ => s,
                })
                .collect(),
            server_tcp: Vec::new(),
        })
        .collect();
    RpmDirection {
        goodput_bits_per_second: mbit * 1e6,
        goodput_confidence: Confidence::High,
        responsiveness: Some(Responsiveness {
            rpm: 1000.0,
            foreign_rpm: 1000.0,
            self_rpm: 1000.0,
            tcp: c(10.0),
            tls: None,
            http: c(10.0),
            loaded: c(loaded_ms),
        }),
        rpm_confidence: Confidence::High,
        connections: conns,
        duration_ms: 3000,
        intervals,
        tcp_info: None,
        server_tcp_info: None,
        limited_by: None,
    }
}

fn sender(srtt_us: u32, retransmits: u32, rwnd: f64, sndbuf: f64) -> TcpSample {
    TcpSample {
        transfer: Transfer::Send,
        srtt_us,
        rttvar_us: 2000,
        min_rtt_us: Some(10_000),
        mss_bytes: 1448,
        retransmits,
        busy_percent: Some(100.0),
        rwnd_limited_percent: Some(rwnd),
        sndbuf_limited_percent: Some(sndbuf),
        ..Default::default()
    }
}

fn receiver(rcv_wnd: u32, srtt_us: u32) -> TcpSample {
    TcpSample {
        transfer: Transfer::Receive,
        srtt_us,
        min_rtt_us: Some(10_000),
        rcv_wnd_bytes: Some(rcv_wnd),
        mss_bytes: 1448,
        ..Default::default()
    }
}

#[test]
fn an_upload_into_a_queue_that_drops_is_the_networks() {
    // 20 Mbit/s through a 24 ms queue over a 10 ms base: RTT 30 ms, losses.
    let mut d = direction(4, 19.0, 32.0, |i| sender(30_000 + i * 100, 3, 0.0, 0.0));
    judge_direction(&mut d, true, Some(10.5));
    let t = d.tcp_info.as_ref().unwrap();
    assert_eq!((t.connections, t.intervals), (4, 5), "slow start left out");
    assert_eq!(t.retransmits.unwrap().median, 15.0);
    let v = d.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::Network, "{}", v.sentence());
    assert_eq!(v.strength, 1.0);
    let figures: Vec<&str> = v.evidence.iter().map(|e| e.figure.as_str()).collect();
    assert!(figures.contains(&"tcp_info.srtt_us"), "{figures:?}");
    assert!(figures.contains(&"responsiveness.loaded.trimmed_mean_ms"));
    // 60 retransmits of 19e6 / 8 * 2.5 s / 1448 segments.
    let r = v
        .evidence
        .iter()
        .find(|e| e.figure.ends_with("retransmits"));
    assert_eq!(r.unwrap().value, 60.0);
}

#[test]
fn an_upload_that_waited_on_its_own_buffer_is_the_senders_buffer() {
    let mut d = direction(4, 8.0, 11.0, |_| sender(10_400, 0, 0.0, 85.0));
    judge_direction(&mut d, true, Some(10.5));
    let v = d.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::SenderBuffer, "{}", v.sentence());
    assert!((v.strength - 0.85).abs() < 1e-9);
    assert_eq!(v.evidence[0].figure, "tcp_info.sndbuf_limited_percent");
}

#[test]
fn an_upload_held_by_the_servers_window_is_the_receivers_window() {
    let mut d = direction(2, 8.0, 11.0, |_| sender(10_400, 0, 70.0, 0.0));
    judge_direction(&mut d, true, Some(10.5));
    assert_eq!(d.limited_by.unwrap().verdict, Limit::ReceiverWindow);
}

#[test]
fn a_download_through_a_full_client_window_is_the_receivers_window() {
    // 4 connections at 12 Mbit/s over 20 ms: 7.3 KiB in flight each, an 8 KiB window.
    let mut d = direction(4, 12.0, 20.0, |_| receiver(8192, 20_200));
    judge_direction(&mut d, false, Some(20.0));
    let v = d.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::ReceiverWindow, "{}", v.sentence());
    assert!(v.strength > 0.7, "{}", v.strength);
    assert_eq!(v.evidence[0].end, crate::verdict::TransferEnd::Receiver);
}

#[test]
fn a_download_whose_window_had_room_and_whose_probes_queued_is_the_networks() {
    // 19 Mbit/s over 34 ms loaded: 20 KiB in flight each of a 128 KiB window.
    let mut d = direction(4, 19.0, 34.0, |_| receiver(128 << 10, 33_000));
    judge_direction(&mut d, false, Some(10.5));
    let v = d.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::Network, "{}", v.sentence());
    assert_eq!(v.strength, 1.0);
    // The client's receiver sees no retransmissions of the server's: none claimed.
    assert!(v.evidence.iter().all(|e| !e.figure.contains("retrans")));
}

#[test]
fn no_tcp_info_no_verdict_and_nothing_found_is_the_network_at_the_floor() {
    let mut d = direction(1, 5.0, 10.0, |_| sender(10_000, 0, 0.0, 0.0));
    for i in &mut d.intervals {
        i.tcp.clear();
    }
    judge_direction(&mut d, true, Some(10.0));
    assert!(d.tcp_info.is_none() && d.limited_by.is_none());
    let mut d = direction(1, 5.0, 10.0, |_| sender(10_000, 0, 0.0, 0.0));
    judge_direction(&mut d, true, Some(10.0));
    let v = d.limited_by.as_ref().unwrap();
    assert_eq!((v.verdict, v.strength), (Limit::Network, 0.1));
    assert!(loaded_tcp(&d, false).is_none(), "no receive samples");
}

#[test]
fn a_download_the_server_saw_rwnd_limited_is_the_receivers_window_by_its_evidence() {
    // The client's window had room by its own figures (a 64 KiB window, 13 % filled)...
    let mut d = direction(4, 12.0, 20.0, |_| receiver(64 << 10, 22_000));
    // ...but the server, the sender, waited on it 80 % of the time and lost nothing.
    for i in &mut d.intervals {
        i.server_tcp = (0..4)
            .map(|c| TcpSample {
                connection: c,
                ..sender(22_000, 0, 80.0, 0.0)
            })
            .collect();
    }
    judge_direction(&mut d, false, Some(20.0));
    assert_eq!(d.server_tcp_info.as_ref().unwrap().connections, 4);
    let v = d.limited_by.as_ref().unwrap();
    assert_eq!(v.verdict, Limit::ReceiverWindow, "{}", v.sentence());
    assert!((v.strength - 0.8).abs() < 1e-9);
    let e = &v.evidence[0];
    assert_eq!(e.measured_by, Some(crate::side::Role::Server));
    assert_eq!(e.figure, "tcp_info.rwnd_limited_percent");
    assert_eq!(
        v.evidence[1].figure, "tcp_info.rcv_wnd_bytes",
        "the client's too"
    );
    // The server's retransmissions are the download's loss signal.
    for i in &mut d.intervals {
        for s in &mut i.server_tcp {
            (s.rwnd_limited_percent, s.retransmits) = (Some(0.0), 5);
        }
    }
    judge_direction(&mut d, false, Some(20.0));
    let v = d.limited_by.as_ref().unwrap();
    assert_eq!(v.verdict, Limit::Network, "{}", v.sentence());
    let r = v
        .evidence
        .iter()
        .find(|e| e.figure == "intervals.server_tcp.retransmits");
    assert_eq!(r.unwrap().measured_by, Some(crate::side::Role::Server));
}

#[test]
fn probes_that_waited_in_the_hosts_with_no_queue_on_the_path_do_not_name_the_network() {
    // A capped client send buffer: the kernel's RTT at the base, the self probes 11 ms
    // over the idle round trip (behind the client's own unsent bytes).
    let mut d = direction(4, 22.0, 43.0, |_| TcpSample {
        min_rtt_us: Some(30_000),
        ..sender(30_300, 0, 0.0, 3.0)
    });
    judge_direction(&mut d, true, Some(32.0));
    let v = d.limited_by.as_ref().unwrap();
    assert!(v.strength <= 0.1, "{}", v.sentence());
}

/// An rpm document of the two directions (either may be absent) after a 10 ms idle round
/// trip, through the results layer's front door for verdicts.
fn run(download: Option<RpmDirection>, upload: Option<RpmDirection>) -> crate::Document {
    use crate::document::{End, LocalStart, Section};
    use crate::rpm::RpmEnd;
    let spec = crate::spec::RpmSpec::new(
        "https://198.18.0.2:4443".into(),
        true,
        Default::default(),
        download.is_some(),
        upload.is_some(),
    );
    let rpm = RpmEnd {
        idle: Some(c(10.0)),
        download,
        upload,
        ..Default::default()
    };
    let start = LocalStart {
        spec: crate::TestSpec::Rpm(spec),
        command: "sonde rpm https://198.18.0.2:4443".into(),
        host: Default::default(),
        started_at: "2026-11-29T09:00:00Z".into(),
        software: "test".into(),
    };
    let mut doc = crate::Document::local(
        start,
        Vec::new(),
        End::new(false, None, Section::Rpm { rpm }),
    );
    doc.end.limited_by = super::judge(&doc);
    doc
}

/// A download held by the client's window (its loaded round trip `loaded_ms`) and an
/// upload into a dropping queue (`up_ms`), each with its own verdict filled as the client
/// fills it.
fn both(down_ms: f64, up_ms: f64) -> (RpmDirection, RpmDirection) {
    let mut down = direction(4, 12.0, down_ms, |_| receiver(8192, 20_200));
    judge_direction(&mut down, false, Some(10.0));
    let mut up = direction(4, 19.0, up_ms, |i| sender(30_000 + i * 100, 3, 0.0, 0.0));
    judge_direction(&mut up, true, Some(10.0));
    (down, up)
}

#[test]
fn the_runs_verdict_is_the_least_responsive_directions_named_as_it() {
    use super::rpm::{as_run, Way};
    // The upload's queue held its probes 32 ms, the download's 20: the upload's.
    let (down, up) = both(20.0, 32.0);
    let doc = run(Some(down.clone()), Some(up.clone()));
    let v = doc.end.limited_by.as_ref().expect("the run's verdict");
    let of_up = up.limited_by.as_ref().unwrap();
    assert_eq!((v.verdict, v.strength), (Limit::Network, of_up.strength));
    assert_eq!(*v, as_run(Way::Upload, of_up));
    // Every figure is named by its path under end.rpm, every sentence by its direction.
    assert_eq!(v.evidence.len(), of_up.evidence.len());
    for (run, own) in v.evidence.iter().zip(&of_up.evidence) {
        assert_eq!(run.figure, format!("upload.{}", own.figure));
        assert!(run.text.starts_with("upload: "), "{}", run.text);
        assert_eq!((run.value, run.measured_by), (own.value, own.measured_by));
    }
    // The download's stays in its own place, untouched.
    let rpm = doc.end.rpm().unwrap();
    assert_eq!(rpm.download.as_ref().unwrap().limited_by, down.limited_by);
    assert_eq!(
        down.limited_by.as_ref().unwrap().verdict,
        Limit::ReceiverWindow
    );
    // The download's probes waiting longer make it the download's.
    let (down, up) = both(40.0, 32.0);
    let doc = run(Some(down.clone()), Some(up));
    let v = doc.end.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::ReceiverWindow, "{}", v.sentence());
    assert_eq!(v, as_run(Way::Download, down.limited_by.as_ref().unwrap()));
    assert!(v
        .sentence()
        .contains("download: the client (receiver) advertised"));
}

#[test]
fn no_verdict_is_claimed_from_a_direction_not_measured_or_not_judged() {
    use super::rpm::{as_run, Way};
    let (down, mut up) = both(20.0, 32.0);
    // A download-only run: the download's, though an upload would have queued longer.
    let doc = run(Some(down.clone()), None);
    let want = as_run(Way::Download, down.limited_by.as_ref().unwrap());
    assert_eq!(doc.end.limited_by, Some(want.clone()));
    // An upload without the client's TCP_INFO has no verdict, so it is never the run's.
    for i in &mut up.intervals {
        i.tcp.clear();
    }
    up.tcp_info = None;
    let doc = run(Some(down), Some(up.clone()));
    assert_eq!(doc.end.limited_by, Some(want));
    // Neither judged: no verdict at all; no direction: none either.
    assert_eq!(run(None, Some(up)).end.limited_by, None);
    assert_eq!(run(None, None).end.limited_by, None);
}

#[test]
fn a_tie_or_no_loaded_round_trip_is_the_downloads() {
    let (down, up) = both(32.0, 32.0);
    let doc = run(Some(down), Some(up.clone()));
    assert_eq!(doc.end.limited_by.unwrap().verdict, Limit::ReceiverWindow);
    // A direction that measured its loaded round trip comes before one that did not.
    let (mut down, _) = both(90.0, 32.0);
    down.responsiveness = None;
    let doc = run(Some(down), Some(up));
    assert_eq!(doc.end.limited_by.unwrap().verdict, Limit::Network);
}
