//! The pps and rr rules on documents built from plain figures.

use crate::document::Document;
use crate::latency::LatencySummary;
use crate::side::{
    BlockedSends, CpuBreakdown, PpsResult, QdiscCounters, Role, RrResult, SideResult, SideSection,
};
use crate::spec::{PollMode, PpsSpec, RrSpec, TestSpec};
use crate::verdict::Limit;

const SECS: f64 = 4.0;

/// A side whose one worker thread on `cpu` is `busy` %, most of it in softirq.
fn side(role: Role, busy: f64, cpu: usize) -> SideResult {
    let time = CpuBreakdown {
        system_percent: busy * 0.3,
        softirq_percent: busy * 0.7,
        idle_percent: 100.0 - busy,
        ..Default::default()
    };
    super::tests::bare_side(role, cpu, time)
}

/// The document of a run with no interval samples.
fn build(spec: &TestSpec, client: &SideResult, server: &SideResult) -> Document {
    super::tests::document(spec, (client, &[]), (server, &[]))
}

/// A pps run: `sent` packets, `got` of them received, `socket_drops` counted by the
/// receiver's sockets.
struct Pps {
    rate: Option<f64>,
    sent: u64,
    got: u64,
    socket_drops: u64,
    sender_busy: f64,
    receiver_busy: f64,
    /// The sender's threads and window, its sends' waits for room, its interface's qdisc.
    threads: u32,
    secs: f64,
    blocked: Option<BlockedSends>,
    qdisc: Option<QdiscCounters>,
}

impl Pps {
    fn plain() -> Pps {
        Pps {
            rate: None,
            sent: 4_000_000,
            got: 4_000_000,
            socket_drops: 0,
            sender_busy: 99.0,
            receiver_busy: 60.0,
            threads: 1,
            secs: SECS,
            blocked: None,
            qdisc: None,
        }
    }

    fn verdict(&self) -> crate::verdict::LimitedBy {
        let spec = TestSpec::Pps(PpsSpec {
            rate_pps: self.rate,
            ..Default::default()
        });
        let part = |packets: u64, drops| PpsResult {
            size_bytes: 64,
            packets,
            per_flow: vec![packets],
            socket_drops: drops,
            poll: "block".into(),
            ..Default::default()
        };
        let mut c = side(Role::Client, self.sender_busy, 0);
        c.section = SideSection::Pps(PpsResult {
            blocked_sends: self.blocked.clone(),
            ..part(self.sent, None)
        });
        (c.threads, c.window_s, c.qdisc) = (self.threads, self.secs, self.qdisc.clone());
        let mut s = side(Role::Server, self.receiver_busy, 1);
        s.section = SideSection::Pps(part(self.got, Some(self.socket_drops)));
        build(&spec, &c, &s).end.limited_by.expect("a verdict")
    }
}

#[test]
fn a_receiver_that_overflowed_its_socket_is_receiver_drops() {
    let v = Pps {
        got: 3_000_000,
        socket_drops: 1_000_000,
        receiver_busy: 99.0,
        ..Pps::plain()
    }
    .verdict();
    assert_eq!(v.verdict, Limit::ReceiverDrops);
    assert!(v
        .evidence
        .iter()
        .any(|e| e.figure == "packets.socket_drops"));
    assert_eq!(v.runner_up.unwrap().verdict, Limit::ReceiverCpu);
}

/// CI's run (limit_netns): 0.54 % dropped by a receiver whose one CPU was 95 % busy. The
/// drops still lead; the saturated CPU is their runner-up, however small the drops.
#[test]
fn few_drops_at_a_saturated_receiver_are_still_receiver_drops() {
    let v = Pps {
        got: 3_978_400,
        socket_drops: 21_600,
        receiver_busy: 95.0,
        ..Pps::plain()
    }
    .verdict();
    assert_eq!(v.verdict, Limit::ReceiverDrops, "{v:?}");
    assert_eq!(v.runner_up.unwrap().verdict, Limit::ReceiverCpu);
}

/// CI's next run: 0.22 % dropped at the receiver while the sender's CPU was 100 % busy
/// (softirq: on a veth the sender's CPU carries the receive path): the sender's CPU came
/// out 0.501 against the drops' 0.499. A sender that never waits is always busy; the drops
/// lead.
#[test]
fn few_drops_with_a_saturated_sender_are_still_receiver_drops() {
    let v = Pps {
        got: 3_991_200,
        socket_drops: 8_800,
        sender_busy: 100.0,
        receiver_busy: 60.0,
        ..Pps::plain()
    }
    .verdict();
    assert_eq!(v.verdict, Limit::ReceiverDrops, "{v:?}");
    assert_eq!(v.runner_up.unwrap().verdict, Limit::SenderCpu);
}

#[test]
fn loss_no_receiver_counted_is_between_the_hosts() {
    let v = Pps {
        got: 3_800_000,
        ..Pps::plain()
    }
    .verdict();
    assert_eq!(v.verdict, Limit::Network);
    assert_eq!(v.evidence[0].value, 200_000.0);
}

#[test]
fn a_sender_whose_packets_all_arrived_is_its_cpu() {
    assert_eq!(Pps::plain().verdict().verdict, Limit::SenderCpu);
}

#[test]
fn a_pps_rate_met_without_loss_is_the_tests_own() {
    let v = Pps {
        rate: Some(1_000_000.0),
        sender_busy: 40.0,
        ..Pps::plain()
    }
    .verdict();
    assert_eq!(v.verdict, Limit::TestRate);
    assert_eq!(v.evidence[1].unit, "packets/s");
}

/// The run of the issue (a 50 Mbit/s tbf on the sender's own veth, 64-byte packets), as
/// measured on the 2-vCPU VM: 97.6 kpps over 2.0 s, nothing lost, the sender's CPU 100 %
/// busy with the shaper's work, its sends never waiting (the shaper's per-packet timer
/// cost kept its queue from filling), its tbf holding packets back 59,185 times for the
/// 194,713 it passed. The shaper, not the sender's CPU.
#[test]
fn a_sender_held_to_its_shapers_rate_is_the_network_not_its_cpu() {
    let v = Pps {
        sent: 195_200,
        got: 195_200,
        sender_busy: 100.0,
        threads: 2,
        secs: 2.0,
        blocked: Some(BlockedSends::default()),
        qdisc: Some(tbf(59_185, 194_713, 0)),
        ..Pps::plain()
    }
    .verdict();
    assert_eq!(v.verdict, Limit::Network, "{v:?}");
    assert_eq!(v.strength, 1.0);
    let e = &v.evidence[0];
    assert_eq!(
        (e.figure.as_str(), e.value, e.unit.as_str()),
        ("qdisc.overlimits", 59_185.0, "events")
    );
    assert_eq!(
        e.text,
        "its interface v0's qdisc (tbf) held packets back over its rate 59185 times for 194713 \
         it passed (30 %), dropped 0, and held 0 bytes (0 packets) at the window's end"
    );
    // The sender's CPU is no runner-up: it was busy with the shaper's work.
    assert_eq!(v.runner_up, None, "{v:?}");
}

/// A tbf far below the sender's rate (5 Mbit/s), measured: 2 threads waited 2.96 s of
/// their 2 x 1.50 s for room in 290 sends, the tbf holding 28,416 bytes. The sender's
/// waits lead the evidence; its CPU (busy with another's work) is no finding.
#[test]
fn a_sender_whose_sends_waited_for_room_is_the_network() {
    let v = Pps {
        sent: 14_640,
        got: 14_640,
        sender_busy: 100.0,
        threads: 2,
        secs: 1.5,
        blocked: Some(BlockedSends {
            would_block: 290,
            no_buffers: 0,
            seconds: 2.96,
        }),
        qdisc: Some(tbf(39_585, 14_657, 28_416)),
        ..Pps::plain()
    }
    .verdict();
    assert_eq!(v.verdict, Limit::Network, "{v:?}");
    let e = &v.evidence[0];
    assert_eq!(
        (e.figure.as_str(), e.value, e.unit.as_str()),
        ("blocked_sends.seconds", 2.96, "s")
    );
    assert_eq!(e.measured_by, Some(Role::Client));
    assert_eq!(
        e.text,
        "sender's sends found the queue ahead full 290 times and waited 2.96 s for room: 99 % \
         of its 2 threads' 1.50 s"
    );
    assert_eq!(v.evidence[1].figure, "qdisc.overlimits");
    assert_eq!(v.runner_up, None, "{v:?}");
}

/// Waiting 2 % of its time (the noise floor is 5 %) says nothing: a saturated sender
/// without a shaper is still its CPU. At 14 % (three fifths of the way to 20 %) the queue
/// ahead leads at 0.6 and the CPU, busy the rest of the time, is its runner-up at 0.4.
#[test]
fn a_sender_that_waited_a_little_is_still_its_cpu() {
    let waited = |seconds: f64| Pps {
        blocked: Some(BlockedSends {
            would_block: 10,
            no_buffers: 0,
            seconds,
        }),
        ..Pps::plain()
    };
    let v = waited(0.08).verdict();
    assert_eq!((v.verdict, v.strength), (Limit::SenderCpu, 1.0), "{v:?}");
    let v = waited(0.56).verdict();
    assert_eq!(v.verdict, Limit::Network, "{v:?}");
    assert!((v.strength - 0.6).abs() < 1e-9, "{v:?}");
    let r = v.runner_up.expect("the sender's CPU");
    assert_eq!(r.verdict, Limit::SenderCpu);
    assert!((r.strength - 0.4).abs() < 1e-9, "{r:?}");
}

/// A root tbf on interface v0 that held packets back `overlimits` times for `packets`
/// passed, with `backlog` bytes queued at the end (64-byte packets).
fn tbf(overlimits: u64, packets: u64, backlog: u64) -> QdiscCounters {
    QdiscCounters {
        iface: "v0".into(),
        kind: "tbf".into(),
        packets,
        overlimits,
        backlog_bytes: backlog,
        backlog_packets: backlog / 64,
        ..Default::default()
    }
}

/// An rpc run: `rps` completed, `in_flight` = C × W, a mean round trip.
struct Rr {
    rate: Option<f64>,
    poll: PollMode,
    rps: f64,
    mean_rtt_us: f64,
    client_busy: f64,
    server_busy: f64,
}

impl Rr {
    fn verdict(&self) -> crate::verdict::LimitedBy {
        let spec = TestSpec::Rpc(RrSpec {
            connections: 4,
            window: 2,
            rate_per_s: self.rate,
            open_loop: self.rate.is_some(),
            poll: self.poll,
            ..Default::default()
        });
        self.verdict_of(&spec, None)
    }

    /// The verdict on `spec`'s run, its client's stages `stages` (`--stages`).
    fn verdict_of(
        &self,
        spec: &TestSpec,
        stages: Option<crate::stages::Stages>,
    ) -> crate::verdict::LimitedBy {
        self.doc_of(spec, stages).end.limited_by.expect("a verdict")
    }

    /// [`Rr::verdict_of`]'s document.
    fn doc_of(&self, spec: &TestSpec, stages: Option<crate::stages::Stages>) -> Document {
        let messages = (self.rps * SECS) as u64;
        let part = |latency| RrResult {
            poll: "block".into(),
            messages,
            sent: messages,
            latency_ns: latency,
            ..Default::default()
        };
        let ns = (self.mean_rtt_us * 1e3) as u64;
        let latency = LatencySummary {
            count: messages,
            min: ns,
            mean: self.mean_rtt_us * 1e3,
            stddev: 0.0,
            p50: ns,
            p90: ns,
            p99: ns,
            p999: ns,
            p9999: ns,
            max: ns,
            histogram: None,
        };
        let mut c = side(Role::Client, self.client_busy, 0);
        c.section = SideSection::Rr(RrResult {
            stages,
            ..part(Some(latency))
        });
        let mut s = side(Role::Server, self.server_busy, 1);
        s.section = SideSection::Rr(part(None));
        build(spec, &c, &s)
    }
}

#[test]
fn rr_with_idle_cpus_is_the_round_trip() {
    let rr = Rr {
        rate: None,
        poll: PollMode::Block,
        rps: 80_000.0,
        mean_rtt_us: 100.0,
        client_busy: 40.0,
        server_busy: 30.0,
    };
    let v = rr.verdict();
    assert_eq!(v.verdict, Limit::Network);
    assert!(v.evidence[0].text.contains("8 requests in flight"), "{v:?}");
    let busy = Rr {
        server_busy: 99.0,
        ..rr
    };
    assert_eq!(busy.verdict().verdict, Limit::ReceiverCpu);
}

#[test]
fn busy_polling_cores_are_not_read_as_saturated() {
    let v = Rr {
        rate: None,
        poll: PollMode::Busy,
        rps: 80_000.0,
        mean_rtt_us: 100.0,
        client_busy: 100.0,
        server_busy: 100.0,
    }
    .verdict();
    // 70 % of each core is softirq in these figures: not saturated by the kernel's work.
    assert_eq!(v.verdict, Limit::Network);
}

#[test]
fn an_open_loop_at_its_rate_is_the_tests_own() {
    let v = Rr {
        rate: Some(20_000.0),
        poll: PollMode::Block,
        rps: 19_990.0,
        mean_rtt_us: 100.0,
        client_busy: 20.0,
        server_busy: 20.0,
    }
    .verdict();
    assert_eq!(v.verdict, Limit::TestRate);
}

/// A paced ping at 1,000 a second with `--stages` whose echo's wake-up holds the P50 (30
/// of 45 us), both ends' CPUs 10 % busy: its spec, run and stages.
fn staged_ping() -> (TestSpec, Rr, crate::stages::Stages) {
    use crate::stages::{Stage, Stages};
    let mut stages = Stages {
        split: 1_000,
        ..Default::default()
    };
    for (stage, us) in [
        (Stage::ServerWake, 30),
        (Stage::Outside, 5),
        (Stage::ClientWake, 10),
    ] {
        let mut h = crate::latency::new_histogram();
        h.record_n(us * 1_000, 1_000).unwrap();
        stages.ns.insert(stage, LatencySummary::of(&h).unwrap());
    }
    let ping = TestSpec::Ping(RrSpec {
        rate_per_s: Some(1_000.0),
        stages: true,
        ..Default::default()
    });
    let rr = Rr {
        rate: Some(1_000.0),
        poll: PollMode::Block,
        rps: 1_000.0,
        mean_rtt_us: 45.0,
        client_busy: 10.0,
        server_busy: 10.0,
    };
    (ping, rr, stages)
}

/// A paced ping with `--stages`: its rate is how often it samples, so the verdict is the
/// stage holding the P50 (here the echo's wake-up), not the test's rate; a saturated CPU
/// still comes first.
#[test]
fn a_staged_ping_is_judged_by_its_stages_and_a_saturated_cpu_still_wins() {
    let (ping, rr, stages) = staged_ping();
    let v = rr.verdict_of(&ping, Some(stages.clone()));
    assert_eq!(v.verdict, Limit::ServerWakeUp, "{v:?}");
    assert_eq!(v.evidence[0].figure, "stages.ns.server_wake.p50");
    // Without stages the same ping is its own rate's.
    assert_eq!(rr.verdict_of(&ping, None).verdict, Limit::TestRate);
    let busy = Rr {
        server_busy: 99.0,
        ..rr
    };
    assert_eq!(
        busy.verdict_of(&ping, Some(stages)).verdict,
        Limit::ReceiverCpu
    );
}

/// The stage's host had the hypervisor's steal: the verdict is still the stage, and its
/// evidence says how much of that host's CPU the hypervisor held; under 1 %, nothing.
#[test]
fn a_staged_verdict_names_the_hypervisors_steal_on_the_stages_host() {
    let (ping, rr, stages) = staged_ping();
    let with = |steal: f64| {
        let mut doc = rr.doc_of(&ping, Some(stages.clone()));
        let crate::document::Section::Rr(end) = &mut doc.end.section else {
            panic!("an rr document");
        };
        let core = &mut end.server.as_mut().unwrap().cpu.worker_cpus[0].time;
        core.steal_percent = steal;
        core.idle_percent -= steal;
        crate::limit::judge(&doc).expect("a verdict")
    };
    let v = with(12.0);
    assert_eq!(v.verdict, Limit::ServerWakeUp, "{v:?}");
    let e = v.evidence.last().unwrap();
    assert_eq!(
        (e.figure.as_str(), e.value, e.measured_by),
        ("cpu.worker_cpus.steal_percent", 12.0, Some(Role::Server))
    );
    assert!(
        e.text
            .starts_with("the hypervisor held the server's CPUs 12 % of the run"),
        "{}",
        e.text
    );
    let v = with(0.5);
    assert!(
        v.evidence.iter().all(|e| !e.text.contains("hypervisor")),
        "{v:?}"
    );
}
