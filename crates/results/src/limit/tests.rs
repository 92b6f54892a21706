//! The stream rules on documents built from plain figures: each planted limit, the
//! thresholds' edges, and a close second named as the runner-up.

use crate::document::{Document, Inputs};
use crate::side::{
    ConnectionResult, CoreUsage, CpuBreakdown, CpuUsage, DirectionResult, HostInfo, IntervalSample,
    Role, SampleSection, SideResult, SideSection, StreamResult, StreamSample, Transfer,
    WorkerSched,
};
use crate::spec::{Direction, StreamSpec, TestSpec};
use crate::tcp::TcpSample;
use crate::verdict::Limit;

/// A forward stream run of 4 one-second intervals over one connection.
#[derive(Clone)]
struct Run {
    rate: Option<f64>,
    bits: f64,
    sender_busy: f64,
    receiver_busy: f64,
    rwnd: f64,
    sndbuf: f64,
    retransmits: u32,
    dsack: u32,
    srtt_us: u32,
    min_rtt_us: u32,
    /// Bytes written and not yet sent at each interval's end.
    unsent: u32,
}

const SECS: f64 = 4.0;

/// The document the controller would build of both sides and their intervals.
pub(super) fn document(
    spec: &TestSpec,
    (client, ci): (&SideResult, &[IntervalSample]),
    (server, si): (&SideResult, &[IntervalSample]),
) -> Document {
    Document::assemble(
        Inputs {
            server_address: "198.18.0.2:5301".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            software: "test".into(),
            server: Some(server),
            client_intervals: ci,
            server_intervals: si,
            ..Inputs::new(spec, "sonde", client)
        },
        super::judge,
    )
}

/// A side of `SECS` on one worker thread on `cpu`, busy as `time` says, with no section.
pub(super) fn bare_side(role: Role, cpu: usize, time: CpuBreakdown) -> SideResult {
    let host = HostInfo {
        hostname: role.as_str().into(),
        ..Default::default()
    };
    let mut s = SideResult::new(role, host, SECS, (1, Some(vec![cpu])), vec![]);
    s.worker_cpus = vec![CoreUsage { cpu, time }];
    s
}

impl Run {
    fn plain() -> Run {
        Run {
            rate: None,
            bits: 5e9,
            sender_busy: 50.0,
            receiver_busy: 40.0,
            rwnd: 0.0,
            sndbuf: 0.0,
            retransmits: 0,
            dsack: 0,
            srtt_us: 60,
            min_rtt_us: 20,
            unsent: 0,
        }
    }

    fn side(&self, role: Role, transfer: Transfer, busy: f64, cpu: usize) -> SideResult {
        let bytes = (self.bits / 8.0 * SECS) as u64;
        let time = CpuBreakdown {
            system_percent: busy,
            idle_percent: 100.0 - busy,
            ..Default::default()
        };
        let mut s = bare_side(role, cpu, time);
        s.process_cpu_s = Some(busy / 100.0 * SECS * 0.9);
        let sends = transfer == Transfer::Send;
        let directions = vec![DirectionResult {
            direction: Direction::Forward,
            transfer,
            buffer_bytes: 131072,
            bytes,
            total_bytes: bytes,
            calls: 1,
            connections: vec![ConnectionResult {
                index: 0,
                bytes,
                total_bytes: bytes,
                retransmits: sends.then_some(self.retransmits as u64 * SECS as u64),
                rtt_us: Some(self.srtt_us),
                rttvar_us: None,
                snd_cwnd_segments: None,
                snd_mss_bytes: Some(1448),
                ecn: None,
            }],
        }];
        s.section = SideSection::Stream(StreamResult { directions });
        s
    }

    fn samples(&self, transfer: Transfer) -> Vec<IntervalSample> {
        (0..SECS as u32)
            .map(|i| {
                let tcp = TcpSample {
                    connection: 0,
                    transfer,
                    srtt_us: self.srtt_us,
                    min_rtt_us: Some(self.min_rtt_us),
                    mss_bytes: 1448,
                    retransmits: self.retransmits,
                    dsack_dups: Some(self.dsack),
                    busy_percent: Some(100.0),
                    rwnd_limited_percent: Some(self.rwnd),
                    sndbuf_limited_percent: Some(self.sndbuf),
                    notsent_bytes: Some(self.unsent),
                    ..Default::default()
                };
                let sample = StreamSample {
                    tcp: vec![tcp],
                    ..Default::default()
                };
                IntervalSample::second(i, SampleSection::Stream(sample))
            })
            .collect()
    }

    fn doc(&self) -> Document {
        self.doc_of(StreamSpec::default())
    }

    fn doc_of(&self, spec: StreamSpec) -> Document {
        let spec = TestSpec::Stream(StreamSpec {
            rate_bits_per_s: self.rate,
            ..spec
        });
        let (client, server) = self.sides();
        self.build(&spec, &client, &server)
    }

    fn sides(&self) -> (SideResult, SideResult) {
        (
            self.side(Role::Client, Transfer::Send, self.sender_busy, 0),
            self.side(Role::Server, Transfer::Receive, self.receiver_busy, 1),
        )
    }

    fn build(&self, spec: &TestSpec, client: &SideResult, server: &SideResult) -> Document {
        let (ci, si) = (
            self.samples(Transfer::Send),
            self.samples(Transfer::Receive),
        );
        document(spec, (client, &ci), (server, &si))
    }

    fn verdict(&self) -> Limit {
        self.doc().end.limited_by.expect("a verdict").verdict
    }
}

#[test]
fn a_full_receive_window_with_an_idle_receiver_is_the_window() {
    let run = Run {
        rwnd: 90.0,
        ..Run::plain()
    };
    let v = run.doc().end.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::ReceiverWindow);
    let e = &v.evidence[0];
    assert_eq!(e.figure, "tcp_info.rwnd_limited_percent");
    assert_eq!((e.value, e.unit.as_str()), (90.0, "%"));
    assert_eq!(e.measured_by, Some(Role::Client));
    assert!(
        v.sentence().contains("rwnd-limited 90 %"),
        "{}",
        v.sentence()
    );
}

#[test]
fn a_full_window_behind_a_saturated_receiver_is_its_cpu() {
    let run = Run {
        rwnd: 80.0,
        receiver_busy: 99.0,
        ..Run::plain()
    };
    let v = run.doc().end.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::ReceiverCpu);
    assert!(v.evidence[0].text.starts_with("receiver CPU 1 busy 99 %"));
    // Partly saturated, the receiver shares the finding with its window.
    let half = Run {
        receiver_busy: 88.0,
        ..run
    };
    let v = half.doc().end.limited_by.unwrap();
    assert!(v.runner_up.is_some(), "{v:?}");
}

#[test]
fn a_saturated_receiver_is_its_cpu_before_its_window_fills() {
    // A hogged receiver core behind a receive buffer of megabytes: the window never
    // closed within the test, the unread data waited in the receiver's socket.
    let run = Run {
        receiver_busy: 100.0,
        sender_busy: 45.0,
        unsent: 3 << 20,
        ..Run::plain()
    };
    let v = run.doc().end.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::ReceiverCpu);
    assert!(v.runner_up.is_none(), "{v:?}");
}

#[test]
fn unsent_data_behind_idle_cpus_is_the_congestion_window() {
    let run = Run {
        sender_busy: 3.0,
        receiver_busy: 5.0,
        unsent: 2 << 20,
        ..Run::plain()
    };
    let v = run.doc().end.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::Network);
    assert_eq!(v.evidence[0].figure, "intervals.sender.tcp.notsent_bytes");
    assert!(v.strength > 0.9, "{v:?}");
    // Held back by the test's own pacing, the same data is the rate's.
    let paced = Run {
        rate: Some(5e9),
        ..run
    };
    assert_eq!(paced.verdict(), Limit::TestRate);
    assert!(paced.doc().end.limited_by.unwrap().runner_up.is_none());
}

#[test]
fn a_buffer_set_below_the_paths_need_is_suspect_without_the_chronograph() {
    // At 5 Gbit/s and 60 us, twice the BDP is 75 KB: a 16 KiB --sndbuf cannot cover it.
    let spec = StreamSpec {
        sndbuf_bytes: Some(16 << 10),
        ..Default::default()
    };
    let run = Run {
        sender_busy: 70.0,
        ..Run::plain()
    };
    let v = run.doc_of(spec).end.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::SenderBuffer);
    assert!(v.evidence[0].text.starts_with("--sndbuf 16 KiB"), "{v:?}");
    // 1 MiB covers it: no suspicion.
    let spec = StreamSpec {
        sndbuf_bytes: Some(1 << 20),
        ..Default::default()
    };
    assert_ne!(
        run.doc_of(spec).end.limited_by.unwrap().verdict,
        Limit::SenderBuffer
    );
}

#[test]
fn a_busy_shared_host_is_the_cpu_of_the_end_that_used_more() {
    // Both ends unpinned on one 2-CPU host (a lab), 8 threads each: the threads' own
    // shares look idle, the host's CPUs were not.
    let run = Run {
        sender_busy: 40.0,
        receiver_busy: 44.0,
        ..Run::plain()
    };
    let doc_of = |host_busy: f64| {
        let (mut c, mut s) = run.sides();
        for side in [&mut c, &mut s] {
            side.host.boot_id = Some("one boot".into());
            side.host.cpus_online = Some(2);
            side.pinned_cpus = None;
            side.worker_cpus.clear();
            side.threads = 8;
            side.cpu = Some(CpuUsage {
                cpus: 2,
                host: CpuBreakdown {
                    system_percent: host_busy,
                    idle_percent: 100.0 - host_busy,
                    ..Default::default()
                },
                busiest_cpu: 0,
                busiest: CpuBreakdown::default(),
            });
        }
        run.build(&TestSpec::Stream(StreamSpec::default()), &c, &s)
    };
    let v = doc_of(100.0).end.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::ReceiverCpu, "{v:?}");
    assert!(
        v.evidence[0].text.starts_with("both ends on one host"),
        "{v:?}"
    );
    assert_eq!(v.runner_up.unwrap().verdict, Limit::SenderCpu);
    // Half idle, the shared host limits nothing.
    let v = doc_of(50.0).end.limited_by.unwrap();
    assert!(
        !matches!(v.verdict, Limit::SenderCpu | Limit::ReceiverCpu),
        "{v:?}"
    );
}

#[test]
fn a_full_send_buffer_is_the_buffer() {
    let run = Run {
        sndbuf: 85.0,
        ..Run::plain()
    };
    assert_eq!(run.verdict(), Limit::SenderBuffer);
}

#[test]
fn loss_or_a_standing_queue_is_the_network() {
    // 1.5 % of the segments retransmitted, none of them D-SACKed.
    let segments_per_s = 5e9 / 8.0 / 1448.0;
    let lossy = Run {
        retransmits: (segments_per_s * 0.015) as u32,
        ..Run::plain()
    };
    assert_eq!(lossy.verdict(), Limit::Network);
    let queued = Run {
        srtt_us: 8000,
        min_rtt_us: 100,
        ..Run::plain()
    };
    let v = queued.doc().end.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::Network);
    assert_eq!(v.evidence[0].figure, "tcp_info.srtt_us");
    // The same retransmissions, every one needless (reordering), are no loss.
    let reordered = Run {
        dsack: lossy.retransmits,
        sender_busy: 99.0,
        ..lossy
    };
    assert_eq!(reordered.verdict(), Limit::SenderCpu);
}

#[test]
fn a_rate_met_is_the_tests_own() {
    let run = Run {
        rate: Some(5.1e9),
        ..Run::plain()
    };
    let v = run.doc().end.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::TestRate);
    assert_eq!(v.evidence[0].text, "--rate 5.10 Gbit/s");
    // Far below its rate, the test was held back by something else.
    let short = Run {
        rate: Some(10e9),
        sender_busy: 99.0,
        ..Run::plain()
    };
    assert_eq!(short.verdict(), Limit::SenderCpu);
}

#[test]
fn nothing_found_is_the_network_with_no_host_limit() {
    let v = Run::plain().doc().end.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::Network);
    assert!(v.evidence[0].text.starts_with("no host limit found"));
}

#[test]
fn a_close_second_is_the_runner_up() {
    let run = Run {
        sender_busy: 99.0,
        sndbuf: 45.0,
        ..Run::plain()
    };
    let v = run.doc().end.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::SenderCpu);
    assert_eq!(v.runner_up.unwrap().verdict, Limit::SenderBuffer);
}

#[test]
fn the_verdict_is_written_and_read_back() {
    let doc = Run {
        rwnd: 90.0,
        ..Run::plain()
    }
    .doc();
    let json = serde_json::to_value(&doc).unwrap();
    assert_eq!(json["end"]["limited_by"]["verdict"], "receiver_window");
    assert_eq!(json["end"]["limited_by"]["evidence"][0]["end"], "sender");
    let back: Document = serde_json::from_value(json).unwrap();
    assert_eq!(back.end.limited_by, doc.end.limited_by);
}

#[test]
fn a_busy_sender_core_with_data_unsent_behind_a_queue_is_the_network() {
    // Behind a shaper: RTT 12.5 ms over a 4 ms path, data waiting in the sender's socket
    // at every edge, while other work kept the sender's core busy (iperf3_delay_netns:
    // 99.5 % busy, our sender's threads 1 % of a core). Before, sender_cpu.
    let run = Run {
        sender_busy: 99.5,
        srtt_us: 12_500,
        min_rtt_us: 4_000,
        unsent: 1 << 20,
        ..Run::plain()
    };
    let v = run.doc().end.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::Network, "{v:?}");
    assert_eq!(v.evidence[0].figure, "tcp_info.srtt_us");
    // With nothing unsent (a sender that could not write fast enough), its CPU.
    let starved = Run { unsent: 0, ..run };
    let v = starved.doc().end.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::SenderCpu, "{v:?}");
}

#[test]
fn a_busy_receiver_core_its_worker_slept_on_is_not_its_cpu() {
    // Behind a 100 Mbit/s shaper (RTT 6 ms over a 20 us path) a busy loop kept the
    // receiver's core 100 % busy; its worker ran 0.9 % of the window and waited 0.9 %
    // (limit_netns, a nice 0 hog). Before, receiver_cpu.
    let run = Run {
        receiver_busy: 100.0,
        srtt_us: 6_000,
        ..Run::plain()
    };
    let judged = |on: f64, waited: f64| {
        let (client, mut server) = run.sides();
        server.workers = vec![WorkerSched {
            cpu: 1,
            on_cpu_percent: on,
            waited_percent: waited,
        }];
        let doc = run.build(&TestSpec::Stream(StreamSpec::default()), &client, &server);
        doc.end.limited_by.unwrap()
    };
    let v = judged(0.9, 0.9);
    assert_eq!(v.verdict, Limit::Network, "{v:?}");
    assert_eq!(v.evidence[0].figure, "tcp_info.srtt_us");
    // Its core is not a runner-up either: the receiver's own share is under 1 %.
    assert!(v.runner_up.is_none(), "{v:?}");
    // Starved (it waited on the run queue for most of the window), it is the receiver's CPU.
    let v = judged(30.0, 61.0);
    assert_eq!(v.verdict, Limit::ReceiverCpu, "{v:?}");
    assert!(v.evidence[0]
        .text
        .ends_with("workers ran 30 % and waited 61.0 %"));
    // Without the workers' figures (an older document), the core decides as before.
    assert_eq!(run.verdict(), Limit::ReceiverCpu);
}

#[test]
fn a_shared_host_busy_with_others_work_is_not_either_ends_cpu() {
    // Both ends pinned on one 2-CPU host behind a 100 Mbit/s shaper while other builds
    // kept both CPUs busy: each end's workers ran under 1 % and barely waited
    // (limit_netns, tbf_in_a_router, beside other builds). Before, receiver_cpu from
    // the host's CPUs shared between the ends.
    let run = Run {
        sender_busy: 100.0,
        receiver_busy: 100.0,
        srtt_us: 6_000,
        ..Run::plain()
    };
    let doc_of = |waited: f64| {
        let (mut c, mut s) = run.sides();
        for side in [&mut c, &mut s] {
            side.host.boot_id = Some("one boot".into());
            side.host.cpus_online = Some(2);
            side.process_cpu_s = Some(0.02);
            side.cpu = Some(CpuUsage {
                cpus: 2,
                host: CpuBreakdown {
                    user_percent: 99.0,
                    softirq_percent: 1.0,
                    ..Default::default()
                },
                busiest_cpu: 0,
                busiest: CpuBreakdown::default(),
            });
        }
        c.process_cpu_s = Some(0.01);
        c.workers = vec![WorkerSched {
            cpu: 0,
            on_cpu_percent: 0.4,
            waited_percent: 0.2,
        }];
        s.workers = vec![WorkerSched {
            cpu: 1,
            on_cpu_percent: 0.6,
            waited_percent: waited,
        }];
        run.build(&TestSpec::Stream(StreamSpec::default()), &c, &s)
    };
    let v = doc_of(0.3).end.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::Network, "{v:?}");
    assert!(v.runner_up.is_none(), "{v:?}");
    // A receiver that waited to run a third of the window was starved: its CPU (the
    // shared host's, as the end that used more of it).
    let v = doc_of(33.0).end.limited_by.unwrap();
    assert_eq!(v.verdict, Limit::ReceiverCpu, "{v:?}");
}
