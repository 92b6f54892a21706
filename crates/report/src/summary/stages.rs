//! The stages table of a ping or rpc run (`--stages`): where the round trips' time went.

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
        "{t}\nstages: {} messages split from both ends' kernel timestamps; {} without a stamp, {} out of order (counted, not guessed)\n",
        s.split, s.missing, s.disordered
    )
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
}
