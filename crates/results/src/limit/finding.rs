//! What every kind's rules share: turning findings into one verdict, the loss signal and
//! the test's own rate as a finding.

use crate::side::Role;
use crate::verdict::{Evidence, Finding, Limit, LimitedBy, TransferEnd};

/// A second finding this close to the first (in strength) is named as the runner-up: the
/// two limits are then within the noise of each other's evidence.
pub const RUNNER_UP_WITHIN: f64 = 0.25;

/// The findings of a run, strongest first, as one verdict.
pub(crate) fn pick(mut findings: Vec<Finding>) -> Option<LimitedBy> {
    findings.retain(|f| f.strength > 0.0);
    findings.sort_by(|a, b| b.strength.total_cmp(&a.strength));
    let mut it = findings.into_iter();
    let first = it.next()?;
    let runner_up = it
        .find(|f| f.verdict != first.verdict)
        .filter(|f| f.strength >= first.strength - RUNNER_UP_WITHIN);
    Some(LimitedBy {
        verdict: first.verdict,
        strength: first.strength,
        evidence: first.evidence,
        runner_up,
    })
}

/// Lost or retransmitted packets per packet sent at which loss alone explains a run:
/// above 1 %, TCP spends much of each RTT recovering and a packet-rate test's receiver
/// got visibly less than was sent. 0.05 % is noise: the odd drop any path has, and the
/// needless retransmissions D-SACK does not report on a path that reorders (a veth
/// stream that dropped nothing showed 0.04 % net of D-SACKs). Between the two the signal
/// rises with the logarithm of the rate.
pub const LOSS_DECISIVE: f64 = 0.01;
pub const LOSS_NOISE: f64 = 0.0005;

/// How strongly a loss fraction (lost per sent) says loss limited the run: 0 to 1.
pub(crate) fn loss_signal(fraction: f64) -> f64 {
    if fraction <= LOSS_NOISE {
        return 0.0;
    }
    ((fraction / LOSS_NOISE).log10() / (LOSS_DECISIVE / LOSS_NOISE).log10()).clamp(0.0, 1.0)
}

/// A test that got this share of its own `--rate` ran at the rate it asked for: pacing
/// holds within 3 % of a tbf-measured rate (stream_netns' accuracy test).
pub const RATE_MET: f64 = 0.95;
/// Below this share of its rate something else held the test back; between the two the
/// finding's strength rises linearly.
pub const RATE_FLOOR: f64 = 0.85;

/// The test's own rate as a finding: `asked` per second, `got` per second, in `unit`.
pub(crate) fn rate_finding(
    asked: f64,
    got: f64,
    got_by: (TransferEnd, Role),
    unit: &str,
) -> Finding {
    let share = got / asked;
    let who = match got_by.0 {
        TransferEnd::Receiver => "receiver",
        _ => "sender",
    };
    Finding {
        verdict: Limit::TestRate,
        strength: ((share - RATE_FLOOR) / (RATE_MET - RATE_FLOOR)).clamp(0.0, 1.0),
        evidence: vec![
            Evidence::new(
                TransferEnd::Test,
                None,
                "spec.rate",
                asked,
                unit,
                format!("--rate {}", per_second(asked, unit)),
            ),
            Evidence::new(
                got_by.0,
                Some(got_by.1),
                "rate",
                got,
                unit,
                format!(
                    "{who} ({}) got {} ({:.1} % of it)",
                    got_by.1.as_str(),
                    per_second(got, unit),
                    share * 100.0
                ),
            ),
        ],
    }
}

/// A rate in the unit a person reads: bit/s scaled to Mbit/s or Gbit/s, others as they are.
pub(crate) fn per_second(v: f64, unit: &str) -> String {
    match unit {
        "bit/s" if v >= 1e9 => format!("{:.2} Gbit/s", v / 1e9),
        "bit/s" => format!("{:.1} Mbit/s", v / 1e6),
        _ if v >= 1e6 => format!("{:.2} M{unit}", v / 1e6),
        _ => format!("{v:.0} {unit}"),
    }
}
