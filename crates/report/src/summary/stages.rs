//! The stages table of a ping or rpc run (`--stages`): where the round trips' time went.

use sonde_results::oneway::OneWay;
use sonde_results::stages::{Stage, Stages};

use super::common::{table, us};

/// Each stage's mean (and its share of the summed means, which is the mean round trip of
/// the messages split), P50, P99 and P99.9, with the host whose clock measured it.
pub(super) fn stages_table(s: &Stages) -> String {
    let mut t = table(vec![
        "stage (us)",
        "measured on",
        "mean",
        "share",
        "p50",
        "p99",
        "p99.9",
    ]);
    let total: f64 = s.ns.values().map(|l| l.mean).sum();
    for stage in Stage::ALL {
        let Some(l) = s.ns.get(&stage) else {
            continue;
        };
        t.add_row(vec![
            stage.label().to_string(),
            stage
                .measured_on()
                .map_or("both (remainder)", |r| r.as_str())
                .to_string(),
            format!("{:.2}", l.mean / 1e3),
            format!("{:.0}%", 100.0 * l.mean / total.max(1.0)),
            us(l.p50),
            us(l.p99),
            us(l.p999),
        ]);
    }
    format!(
        "{t}\nstages: {}; {} messages split from both ends' kernel timestamps; {} without a stamp, {} out of order (counted, not guessed)\n",
        s.sampling(), s.split, s.missing, s.disordered
    )
}

/// Each direction's P50, P99 and P99.9 with its bound, then the line that says where
/// the bound comes from (or the clock fault, with no delay).
pub(super) fn oneway_table(o: &OneWay) -> String {
    let (Some(b), Some(f), Some(r)) = (o.bound_ns, &o.forward_ns, &o.reverse_ns) else {
        return format!("{}\n", o.line());
    };
    let mut t = table(vec!["one-way (us)", "p50", "p99", "p99.9", "± bound"]);
    for (way, l) in [("forward (client to server)", f), ("reverse", r)] {
        t.add_row(vec![
            way.to_string(),
            us(l.p50),
            us(l.p99),
            us(l.p999),
            format!("{:.2}", b / 1e3),
        ]);
    }
    let mut out = format!("{t}\n{}\n", o.line());
    if let Some(d) = &o.clocks_disagree {
        out.push_str(&format!("note: {d}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::latency::new_histogram;
    use sonde_results::LatencySummary;

    #[test]
    fn the_table_names_each_stage_its_clock_and_its_share() {
        let mut s = Stages {
            split: 10,
            missing: 2,
            ..Default::default()
        };
        for (i, stage) in Stage::ALL.into_iter().enumerate() {
            let mut h = new_histogram();
            // 1, 2, ... 7 us: 28 us in all, the server's wake-up (4 us) 14 %.
            h.record(1_000 * (i as u64 + 1)).unwrap();
            s.ns.insert(stage, LatencySummary::of(&h).unwrap());
        }
        let text = stages_table(&s);
        let wake = text
            .lines()
            .find(|l| l.contains("server receive wake-up"))
            .unwrap();
        assert!(
            wake.contains("server") && wake.contains("14%") && wake.contains("4.00"),
            "{wake}"
        );
        let outside = text
            .lines()
            .find(|l| l.contains("outside the hosts"))
            .unwrap();
        assert!(outside.contains("both (remainder)"), "{outside}");
        assert!(
            text.contains("10 messages split") && text.contains("2 without a stamp"),
            "{text}"
        );
    }

    /// The real shifted run: a row per direction with its bound, then where the bound
    /// comes from and the contradicted claim.
    #[test]
    fn the_oneway_table_gives_each_direction_and_its_bound() {
        let doc = crate::fixtures::stored("v2-ping-oneway.json");
        let o = doc.end.rr().unwrap().oneway.as_deref().unwrap();
        let text = oneway_table(o);
        let b = format!("{:.2}", o.bound_ns.unwrap() / 1e3);
        for way in ["forward (client to server)", "reverse"] {
            let row = text.lines().find(|l| l.contains(way)).expect(way);
            assert!(row.contains(&b), "{row}");
        }
        assert!(text.contains("(bound from the exchange; one clock: both ends on one host; the clocks disagree beyond their bounds)"), "{text}");
        assert!(
            text.contains("note: the exchange puts the server's clock 1.234 ms"),
            "{text}"
        );
        let fault = OneWay {
            clock_fault: Some("no clock offset fits".into()),
            ..Default::default()
        };
        assert_eq!(
            oneway_table(&fault),
            "one-way: clock fault: no clock offset fits\n"
        );
    }
}
