//! A load test's document assembled from the documents of the tests each phase ran:
//! their sections read, the load's own section and intervals built.

use super::figures::classify;
use super::{oneway, AddedLatency, LoadEnd, LoadFigures, LoadInterval, PhaseEnd};
use crate::document::{
    Document, End, IntervalFigures, IntervalSection, Section, Start, SCHEMA_VERSION,
};
use crate::side::Role;
use crate::spec::{LoadSpec, Phase, TestName, TestSpec, Transport};
use crate::stages::{Stage, Stages};

/// What one phase ran and measured: its tests' documents (`None` where a test could not
/// start) and why any of them failed.
pub struct PhaseRun {
    pub phase: Phase,
    /// When the phase started, seconds after the load test's start.
    pub offset_s: f64,
    pub udp: Option<Document>,
    pub tcp: Option<Document>,
    pub load: Option<Document>,
    pub errors: Vec<String>,
}

/// The document of a load test, or `None` when no test of any phase started.
pub fn build(
    spec: &LoadSpec,
    command: &str,
    runs: &[PhaseRun],
    error: Option<String>,
) -> Option<Document> {
    let first = runs
        .iter()
        .flat_map(|r| [&r.udp, &r.tcp, &r.load])
        .flatten()
        .next()?;
    let start = Start {
        spec: TestSpec::Load(spec.clone()),
        command: command.to_string(),
        ..first.start.clone()
    };
    let mut phases: Vec<PhaseEnd> = runs.iter().map(phase_end).collect();
    rebase(&mut phases);
    let partial =
        error.is_some() || runs.len() < spec.phases.len() || phases.iter().any(|p| p.partial);
    let error = error.or_else(|| phases.iter().flat_map(|p| p.errors.first()).next().cloned());
    let load = LoadEnd {
        added_latency: added(&phases, spec.load.execution().cpu_latency_us),
        phases,
    };
    let end = End::new(partial, error, Section::Load { load });
    Some(Document {
        schema_version: SCHEMA_VERSION,
        test: TestName::Load,
        start,
        intervals: runs.iter().flat_map(intervals).collect(),
        end,
    })
}

fn phase_end(r: &PhaseRun) -> PhaseEnd {
    let latency = |d: &Option<Document>| d.as_ref()?.end.rr()?.latency_ns.clone();
    let udp = r.udp.as_ref();
    let busy = |role: Role| {
        let d = udp?;
        let e = &d.end;
        let cpu = match (&e.one_host, role) {
            (Some(one), _) => one.cpu.as_ref(),
            (None, Role::Client) => e.rr()?.client.as_ref()?.cpu.usage.as_ref(),
            (None, Role::Server) => e.rr()?.server.as_ref()?.cpu.usage.as_ref(),
        };
        cpu.map(|c| c.host.busy_percent())
    };
    let mut errors = r.errors.clone();
    let tests = [
        ("UDP ping", &r.udp),
        ("TCP ping", &r.tcp),
        ("load", &r.load),
    ];
    for (what, d) in tests {
        if let Some(e) = d.as_ref().map(|d| &d.end).filter(|e| e.partial) {
            let why = e.error.as_deref().unwrap_or("cut short");
            errors.push(format!("{} phase, {what}: {why}", r.phase.as_str()));
        }
    }
    let missing =
        r.udp.is_none() || r.tcp.is_none() || (r.phase != Phase::Idle && r.load.is_none());
    PhaseEnd {
        phase: r.phase,
        start_s: r.offset_s,
        seconds: r
            .udp
            .as_ref()
            .map_or(0.0, |d| d.start.spec.timing().duration_ms as f64 / 1e3),
        udp_rtt_ns: latency(&r.udp),
        tcp_rtt_ns: latency(&r.tcp),
        udp_stages: stages(&r.udp),
        tcp_stages: stages(&r.tcp),
        udp_oneway: oneway::of(&r.udp),
        tcp_oneway: oneway::of(&r.tcp),
        udp_lost: udp.map(|d| d.end.rr().and_then(|r| r.lost_messages).unwrap_or(0)),
        load: r.load.as_ref().map(end_load).unwrap_or_default(),
        tcp_retransmits: r.load.as_ref().and_then(retransmits),
        client_cpu_busy_percent: busy(Role::Client),
        server_cpu_busy_percent: busy(Role::Server),
        partial: missing || !errors.is_empty(),
        errors,
    }
}

/// The load test's throughput each way, from its document's receivers (its kind's row:
/// `document::Row::load`).
pub fn end_load(d: &Document) -> LoadFigures {
    (crate::document::row(d.test).load)(&d.end.section)
}

fn retransmits(d: &Document) -> Option<u64> {
    let e = d.end.stream()?;
    let reverse = e.reverse.as_ref().and_then(|r| r.sender.as_ref());
    let senders: Vec<_> = e.sender.iter().chain(reverse).collect();
    if senders.is_empty() {
        return None;
    }
    senders
        .iter()
        .map(|s| s.tcp_retransmits.connections)
        .sum::<Option<u64>>()
}

fn interval_load(i: &IntervalFigures) -> LoadFigures {
    let mut f = LoadFigures {
        requests_per_second: i.rr().and_then(|r| r.requests_per_second),
        ..Default::default()
    };
    let reverse = i.reverse.as_ref().and_then(|r| r.receiver.as_ref());
    for r in i.receiver.iter().chain(reverse) {
        classify(
            &mut f,
            r.measured_by,
            r.bits_per_second,
            r.packets_per_second(),
        );
    }
    f
}

/// The phase's intervals: the UDP ping's spans, shifted to the load test's clock, with
/// the TCP ping's and the load's interval of the same index.
fn intervals(r: &PhaseRun) -> Vec<IntervalFigures> {
    fn of(d: &Option<Document>) -> &[IntervalFigures] {
        d.as_ref().map_or(&[], |d| &d.intervals)
    }
    let (udp, tcp, load) = (of(&r.udp), of(&r.tcp), of(&r.load));
    let n = udp.len().max(tcp.len()).max(load.len());
    (0..n)
        .map(|i| {
            let (u, t, l) = (udp.get(i), tcp.get(i), load.get(i));
            let span = u.or(t).or(l).expect("index below the longest");
            IntervalFigures {
                section: IntervalSection::Load {
                    load: LoadInterval {
                        phase: r.phase,
                        udp_rtt_ns: u.and_then(|u| u.rr()?.latency_ns.clone()),
                        tcp_rtt_ns: t.and_then(|t| t.rr()?.latency_ns.clone()),
                        load: l.map(interval_load).unwrap_or_default(),
                    },
                },
                client_cpu_busy_percent: u.and_then(|u| u.client_cpu_busy_percent),
                server_cpu_busy_percent: u.and_then(|u| u.server_cpu_busy_percent),
                ..IntervalFigures::span(r.offset_s + span.start_s, r.offset_s + span.end_s)
            }
        })
        .collect()
}

/// A ping's stages in its phase (`--stages`).
fn stages(d: &Option<Document>) -> Option<Stages> {
    d.as_ref()?.end.rr()?.stages.clone()
}

/// Each stage's P50 in a loaded phase minus idle's.
fn stages_added(idle: &Stages, loaded: &Stages) -> std::collections::BTreeMap<Stage, i64> {
    loaded
        .ns
        .iter()
        .filter_map(|(s, l)| Some((*s, l.p50 as i64 - idle.ns.get(s)?.p50 as i64)))
        .collect()
}

/// Each loaded phase's P50 and P99 minus idle's, per ping; `cpu_latency_us`: the CPU
/// latency limit the test held, for the note of a negative one.
fn added(phases: &[PhaseEnd], cpu_latency_us: Option<u32>) -> Vec<AddedLatency> {
    let Some(idle) = phases.iter().find(|p| p.phase == Phase::Idle) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in phases.iter().filter(|p| p.phase != Phase::Idle) {
        for (transport, base, now) in [
            (
                Transport::Udp,
                (&idle.udp_rtt_ns, &idle.udp_stages, &idle.udp_oneway),
                (&p.udp_rtt_ns, &p.udp_stages, &p.udp_oneway),
            ),
            (
                Transport::Tcp,
                (&idle.tcp_rtt_ns, &idle.tcp_stages, &idle.tcp_oneway),
                (&p.tcp_rtt_ns, &p.tcp_stages, &p.tcp_oneway),
            ),
        ] {
            if let (Some(b), Some(n)) = (base.0, now.0) {
                let diff = (n.p50 as i64 - b.p50 as i64, n.p99 as i64 - b.p99 as i64);
                let mut added = AddedLatency::new(p.phase, transport, diff, cpu_latency_us);
                if let (Some(b), Some(n)) = (base.1, now.1) {
                    added.stages_p50_added_ns = stages_added(b, n);
                }
                if let Some((f, r)) = oneway::added(base.2.as_deref(), now.2.as_deref()) {
                    (added.forward_p50_added_ns, added.reverse_p50_added_ns) = (Some(f), Some(r));
                }
                out.push(added);
            }
        }
    }
    out
}

/// Re-bases every loaded phase's directions, each ping's on its idle phase's offset.
fn rebase(phases: &mut [PhaseEnd]) {
    let Some(idle) = phases.iter().find(|p| p.phase == Phase::Idle) else {
        return;
    };
    let (udp, tcp) = (idle.udp_oneway.clone(), idle.tcp_oneway.clone());
    for p in phases.iter_mut().filter(|p| p.phase != Phase::Idle) {
        for (base, o) in [(&udp, &mut p.udp_oneway), (&tcp, &mut p.tcp_oneway)] {
            if let (Some(base), Some(o)) = (base, o) {
                oneway::on_idle(base, o);
            }
        }
    }
}
