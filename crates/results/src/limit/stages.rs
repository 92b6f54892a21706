//! A ping or rpc run's latency verdict from its stages (`--stages`): the stage that holds
//! most of the P50, and the one whose time grows most from the P50 to the P99, each with
//! what would change it.

use crate::stages::{Stage, Stages};
use crate::verdict::{Evidence, Finding, Limit, TransferEnd};

/// The verdict naming a stage.
pub fn limit_of(stage: Stage) -> Limit {
    match stage {
        Stage::ClientSend => Limit::ClientSendStack,
        Stage::ClientQdisc => Limit::ClientQdisc,
        Stage::Outside => Limit::Path,
        Stage::ServerWake => Limit::ServerWakeUp,
        Stage::ServerTurnaround => Limit::ServerTurnaround,
        Stage::ServerSend => Limit::ServerSendStack,
        Stage::ClientWake => Limit::ClientWakeUp,
    }
}

/// What a stage's time is, and what would change it.
pub fn remedy(stage: Stage) -> &'static str {
    match stage {
        Stage::ClientWake | Stage::ServerWake => {
            "the application sleeps between messages and pays its wake-up (interrupt, scheduler, idle state); --poll busy or --cpu-latency-us 0 removes it"
        }
        Stage::ServerTurnaround => {
            "the echo's own time between reading and answering: CPU contention on its core (--server-cpus to move it)"
        }
        Stage::ClientSend | Stage::ServerSend => {
            "the kernel's send path (system call, TCP/UDP, netfilter); a bypass engine or fewer hooks shortens it"
        }
        Stage::ClientQdisc => {
            "the qdisc holds messages behind other traffic or a shaper on this interface (tc -s qdisc show)"
        }
        Stage::Outside => {
            "the path between the hosts (wire, NICs, switches, hypervisor): nothing on either host changes it"
        }
    }
}

/// The stage finding, as strong as `strength` allows (how far CPUs and loss were from
/// explaining the run instead); `None` without a split message.
pub(super) fn finding(s: &Stages, strength: f64) -> Option<Finding> {
    let p50s: f64 = s.ns.values().map(|l| l.p50 as f64).sum();
    let (&held, most) = s.ns.iter().max_by_key(|(_, l)| l.p50)?;
    let (&grew, tail) =
        s.ns.iter()
            .max_by_key(|(_, l)| l.p99.saturating_sub(l.p50))?;
    let us = |ns: u64| ns as f64 / 1e3;
    let mut evidence = vec![Evidence::new(
        TransferEnd::Test,
        held.measured_on(),
        &format!("stages.ns.{}.p50", key(held)),
        most.p50 as f64,
        "ns",
        format!(
            "{} is {:.0} % of the stages' P50s ({:.1} of {:.1} us): {}",
            held.label(),
            100.0 * most.p50 as f64 / p50s.max(1.0),
            us(most.p50),
            p50s / 1e3,
            remedy(held)
        ),
    )];
    let growth = tail.p99.saturating_sub(tail.p50);
    evidence.push(Evidence::new(
        TransferEnd::Test,
        grew.measured_on(),
        &format!("stages.ns.{}.p99", key(grew)),
        tail.p99 as f64,
        "ns",
        format!(
            "{} grows most from P50 to P99 ({:.1} -> {:.1} us, +{:.1} us){}",
            grew.label(),
            us(tail.p50),
            us(tail.p99),
            us(growth),
            if grew == held {
                String::new()
            } else {
                format!(": {}", remedy(grew))
            }
        ),
    ));
    Some(Finding {
        verdict: limit_of(held),
        strength,
        evidence,
    })
}

/// The stage's JSON key.
fn key(s: Stage) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::{new_histogram, LatencySummary};

    /// Stages whose P50s are `p50` us and P99s `p99` us, in `Stage::ALL`'s order.
    fn stages(p50: [u64; 7], p99: [u64; 7]) -> Stages {
        let mut s = Stages::default();
        for (i, stage) in Stage::ALL.into_iter().enumerate() {
            let mut h = new_histogram();
            h.record_n(p50[i] * 1_000, 98).unwrap();
            h.record_n(p99[i] * 1_000, 2).unwrap();
            s.ns.insert(stage, LatencySummary::of(&h).unwrap());
        }
        s
    }

    #[test]
    fn the_verdict_is_the_stage_holding_the_p50_and_the_tail_grower_is_named() {
        // The server's wake-up holds the P50 (22 of 36 us); the client's wake-up grows most.
        let s = stages([5, 1, 4, 22, 1, 2, 1], [6, 1, 5, 30, 1, 3, 900]);
        let f = finding(&s, 0.8).unwrap();
        assert_eq!(f.verdict, Limit::ServerWakeUp);
        assert_eq!(f.evidence[0].figure, "stages.ns.server_wake.p50");
        assert!(
            f.evidence[0].text.contains("61 % of the stages' P50s"),
            "{}",
            f.evidence[0].text
        );
        assert!(
            f.evidence[0].text.contains("--poll busy"),
            "{}",
            f.evidence[0].text
        );
        assert_eq!(f.evidence[0].measured_by, Some(crate::side::Role::Server));
        assert_eq!(f.evidence[1].figure, "stages.ns.client_wake.p99");
        assert!(f.evidence[1]
            .text
            .contains("client receive wake-up grows most"));
        // The path holds it: nothing on either host changes it.
        let s = stages([2, 1, 90, 3, 1, 2, 3], [2, 1, 95, 3, 1, 2, 3]);
        let f = finding(&s, 0.8).unwrap();
        assert_eq!((f.verdict, f.evidence[0].measured_by), (Limit::Path, None));
        assert!(finding(&Stages::default(), 0.8).is_none());
    }
}
