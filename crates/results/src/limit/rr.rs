//! A ping or rpc run's limit: the test's own rate (open loop), loss of UDP requests, either
//! end's CPU, or else the round trip itself. A closed loop with C × W requests in flight
//! completes at most C × W per round trip, so when neither end's CPU is saturated the
//! path's latency (wire, stacks, wake-ups) is what bounds the rate.

use super::cpu;
use super::finding::{loss_signal, pick, rate_finding};
use super::stages;
use crate::document::{Document, RrEnd, RrEndSide};
use crate::spec::{PollMode, TestSpec};
use crate::verdict::{Evidence, Finding, Limit, LimitedBy, TransferEnd};

pub(super) fn judge(doc: &Document, end: &RrEnd) -> Option<LimitedBy> {
    let (TestSpec::Ping(spec) | TestSpec::Rpc(spec)) = &doc.start.spec else {
        return None;
    };
    let client = end.client.as_ref()?;
    let rps = end.requests_per_second?;
    let spins = matches!(spec.poll, PollMode::Busy);
    let mut found = Vec::new();
    // A ping's rate is how often it samples the round trip, not a rate it aims for: with
    // stages, the question it answers is where each round trip's time went.
    let samples = matches!(doc.start.spec, TestSpec::Ping(_)) && end.stages.is_some();
    if let Some(asked) = spec.rate_per_s.filter(|r| *r > 0.0 && !samples) {
        let by = (TransferEnd::Sender, client.by.measured_by);
        found.push(rate_finding(asked, rps, by, "requests/s"));
    }
    let loss = lost(end, client);
    found.extend(loss.clone());
    let (s_cpu, r_cpu) = cpu::both(
        doc,
        Some(side(TransferEnd::Sender, client, spins)),
        end.server
            .as_ref()
            .map(|s| side(TransferEnd::Receiver, s, spins)),
    );
    let busiest = [&s_cpu, &r_cpu]
        .iter()
        .filter_map(|c| c.as_ref().map(|c| c.level))
        .fold(0.0, f64::max);
    for (c, verdict) in [(s_cpu, Limit::SenderCpu), (r_cpu, Limit::ReceiverCpu)] {
        if let Some(c) = c {
            found.push(Finding {
                verdict,
                strength: c.level,
                evidence: vec![c.evidence],
            });
        }
    }
    let loss_level = loss.map_or(0.0, |l| l.strength);
    let free = (1.0 - busiest).min(1.0 - loss_level).max(0.0);
    // With stages, the round trip is named by the stage that holds it, whatever the pace.
    let staged = end
        .stages
        .as_ref()
        .and_then(|s| stages::finding(s, free * ROUND_TRIP))
        .map(|f| with_steal(f, end));
    match (staged, &end.latency_ns) {
        (Some(f), _) => found.push(f),
        (None, Some(lat)) if !spec.open_loop => {
            found.push(round_trip(spec, client, lat, rps, free))
        }
        _ => {}
    }
    pick(found)
}

/// A stage finding with the hypervisor's steal on each host whose stage it names, where
/// named ([`cpu::steal_named`]): time the stage's host could not run, whatever it waited on.
fn with_steal(mut f: Finding, end: &RrEnd) -> Finding {
    let mut on: Vec<_> = f.evidence.iter().filter_map(|e| e.measured_by).collect();
    on.dedup();
    for role in on {
        let (end_of, side) = match end.client.as_ref().filter(|c| c.by.measured_by == role) {
            Some(c) => (TransferEnd::Sender, Some(c)),
            None => (TransferEnd::Receiver, end.server.as_ref()),
        };
        let Some(side) = side.filter(|s| s.by.measured_by == role) else {
            continue;
        };
        if let Some((figure, steal)) = cpu::steal_named(&side.cpu) {
            let text = format!(
                "the hypervisor held the {}'s CPUs {steal:.0} % of the run (steal): a stolen vCPU's wait is in that host's stages, its wake-ups most",
                role.as_str()
            );
            f.evidence
                .push(Evidence::new(end_of, Some(role), figure, steal, "%", text));
        }
    }
    f
}

/// The round trip's strength when no CPU is saturated and the loop ran at the rate its
/// round trip allows: below a saturated CPU's 1.0, so a CPU that is, wins; above the
/// runner-up distance from an unsaturated one.
pub const ROUND_TRIP: f64 = 0.8;

/// A closed loop's round trip as a finding: C × W requests in flight complete at most
/// once per round trip each. The finding is as strong as the loop came to that bound (a
/// paced loop waits between requests, and its round trip did not limit it), scaled by
/// `free`: how far both CPUs and loss were from explaining the run instead.
fn round_trip(
    spec: &crate::spec::RrSpec,
    client: &RrEndSide,
    lat: &crate::latency::LatencySummary,
    rps: f64,
    free: f64,
) -> Finding {
    let in_flight = spec.connections as f64 * spec.window as f64;
    let bound = in_flight / (lat.mean.max(1.0) / 1e9);
    let text = format!(
        "{in_flight:.0} request{} in flight and a mean round trip of {:.1} us allow {bound:.0} requests/s; {rps:.0} completed",
        if in_flight == 1.0 { "" } else { "s" },
        lat.mean / 1e3,
    );
    let by = Some(client.by.measured_by);
    Finding {
        verdict: Limit::Network,
        strength: free * ROUND_TRIP * (rps / bound).min(1.0),
        evidence: vec![Evidence::new(
            TransferEnd::Test,
            by,
            "latency_ns.mean",
            lat.mean,
            "ns",
            text,
        )],
    }
}

/// The client sends the requests (`sender`), the server answers them (`receiver`).
fn side(end: TransferEnd, s: &RrEndSide, spins: bool) -> cpu::Side<'_> {
    cpu::Side {
        end,
        name: if end == TransferEnd::Sender {
            "client"
        } else {
            "server"
        },
        by: &s.by,
        cpu: &s.cpu,
        seconds: s.seconds,
        spins,
    }
}

/// UDP requests that never came back: the receiver's drops when its NIC counted drops,
/// else the path's.
fn lost(end: &RrEnd, client: &RrEndSide) -> Option<Finding> {
    let lost = end.lost_messages.filter(|l| *l > 0)?;
    let sent = client.requests_sent.filter(|s| *s > 0)? as f64;
    let nic_drops = end
        .server
        .as_ref()
        .and_then(|s| s.counted.nic.as_ref())
        .map_or(0, |n| n.rx_dropped);
    let verdict = if nic_drops > 0 {
        Limit::ReceiverDrops
    } else {
        Limit::Network
    };
    let mut evidence = vec![Evidence::new(
        TransferEnd::Sender,
        Some(client.by.measured_by),
        "lost_messages",
        lost as f64,
        "requests",
        format!(
            "{lost} requests lost ({:.3} % of those sent)",
            lost as f64 / sent * 100.0
        ),
    )];
    if nic_drops > 0 {
        evidence.push(Evidence::new(
            TransferEnd::Receiver,
            end.server.as_ref().map(|s| s.by.measured_by),
            "nic.rx_dropped",
            nic_drops as f64,
            "packets",
            format!("receiver's NIC dropped {nic_drops} packets"),
        ));
    }
    Some(Finding {
        verdict,
        strength: loss_signal(lost as f64 / sent),
        evidence,
    })
}
