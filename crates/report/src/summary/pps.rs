//! A packet-rate test's summary: each side's rate, the loss between them, a search's
//! trials.

use sonde_results::Document;

use super::common::{footer, steal, table};
use crate::units::{bits_per_second, opt};

pub fn pps_heading(spec: &sonde_results::PpsSpec, target: &str, search: bool) -> String {
    format!(
        "sonde pps {target}: {} B packets on the wire ({} B UDP payload), {} flow(s), {} tx / {} rx thread(s), batch {}, {}{}",
        spec.size_bytes,
        spec.payload_bytes(),
        spec.flows,
        spec.tx_threads,
        spec.rx_threads,
        spec.batch,
        spec.rate_pps.map_or("as fast as possible".into(), |r| format!("{r:.0} packets/s offered")),
        if search {
            format!(", zero-loss search with {:.1} s trials", spec.timing.duration_ms as f64 / 1e3)
        } else {
            format!(", {:.1} s measured (+{:.1} s warm-up)", spec.timing.duration_ms as f64 / 1e3, spec.timing.warmup_ms as f64 / 1e3)
        }
    )
}

/// One line per search trial.
pub fn trial_line(n: usize, t: &sonde_results::document::Trial) -> String {
    format!(
        "trial {n:2}: offered {:>12}  sent {:>10.0} pps  received {:>10.0} pps  lost {:>9} ({:.4} %)  {}{}{}",
        t.offered_pps.map_or("max".to_string(), |o| format!("{o:.0} pps")),
        t.sent_pps,
        t.received_pps,
        t.lost_packets,
        t.loss_percent,
        if t.passed { "pass" } else { "FAIL" },
        if t.sender_short { "  (sender short of the offered rate)" } else { "" },
        if t.verification { "  (verification)" } else { "" }
    )
}

/// Human summary of a pps document: both sides' rates, the loss between them, the search.
pub fn pps(doc: &Document) -> String {
    let e = &doc.end;
    let Some((p, search)) = e.pps().and_then(|x| Some((x.packets.as_ref()?, &x.search))) else {
        return "no packet figures\n".into();
    };
    let mut t = table(vec![
        "",
        "packets",
        "packets/s",
        "wire bit/s",
        "total packets",
        "host CPU busy",
        "process CPU s",
        "NIC packets rx / tx",
        "NIC drops rx / tx",
    ]);
    for (label, side) in [
        ("sender (client)", &p.sender),
        ("receiver (server)", &p.receiver),
    ] {
        if let Some(s) = side {
            t.add_row(vec![
                label.to_string(),
                s.packets.to_string(),
                format!("{:.0}", s.packets_per_second),
                bits_per_second(s.bits_per_second),
                s.total_packets.to_string(),
                opt(s.cpu.usage.as_ref(), |c| {
                    format!("{:.1}%{}", c.host.busy_percent(), steal(&c.host))
                }),
                opt(s.cpu.process_cpu_s, |v| format!("{v:.2}")),
                opt(s.counted.nic.as_ref(), |n| {
                    format!("{} / {}", n.rx_packets, n.tx_packets)
                }),
                opt(s.counted.nic.as_ref(), |n| {
                    format!("{} / {}", n.rx_dropped, n.tx_dropped)
                }),
            ]);
        }
    }
    let mut out = format!("{t}\n");
    out.push_str(&format!(
        "lost {} of the packets sent ({}); reordered {}, duplicated {}; socket drops at the receiver {}; flows with loss {} of {}\n",
        opt(p.lost_packets, |v| v.to_string()),
        opt(p.loss_percent, |v| format!("{v:.4} %")),
        opt(p.reordered_packets, |v| v.to_string()),
        opt(p.duplicated_packets, |v| v.to_string()),
        opt(p.socket_drops, |v| v.to_string()),
        opt(p.flows_with_loss, |v| v.to_string()),
        p.flows
    ));
    if let Some(r) = p.receiver_to_sender_ratio {
        out.push_str(&format!(
            "the receiver counted {:.2} % of the sender's packet rate\n",
            r * 100.0
        ));
    }
    if let Some(s) = search {
        out.push_str(&format!(
            "zero-loss search (loss <= {} %, {} trials of {:.1} s): {:.0} packets/s, limited by {}\n",
            s.max_loss_percent,
            s.trials.len(),
            s.trial_ms as f64 / 1e3,
            s.result_pps,
            match s.limited_by.as_str() {
                "sender" => "the sender (it lost nothing at the highest rate it reached)",
                "loss" => "loss (between a rate without loss and one with)",
                other => other,
            }
        ));
        if s.confirmed == Some(false) && s.result_pps > 0.0 {
            out.push_str(
                "unconfirmed: no last trial at that rate passed sending it (its sender fell short, or trials ran out)\n",
            );
        }
    }
    for side in [&p.sender, &p.receiver].into_iter().flatten() {
        out.push_str(&super::common::bypass_line(&side.by));
        for n in &side.counted.notes {
            out.push_str(&format!("note: {}: {n}\n", side.by.measured_by.as_str()));
        }
    }
    out.push_str(&footer(e));
    out
}

/// A pps run's one figure in `sonde results list`: the packets its receiver received.
pub(crate) fn listed(e: &sonde_results::document::End) -> String {
    match e.pps().and_then(|p| p.packets.as_ref()?.receiver.as_ref()) {
        Some(r) => format!(
            "{} pkt/s received",
            crate::units::sig3(r.packets_per_second)
        ),
        None => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A search whose last trial did not confirm its result says so; a confirmed one and
    /// a stored one from before it was recorded say nothing of it.
    #[test]
    fn an_unconfirmed_search_result_says_so() {
        let mut doc = crate::fixtures::stored("v2-pps-search.json");
        let said = |doc: &Document| pps(doc).contains("unconfirmed");
        assert!(!said(&doc), "{}", pps(&doc));
        fn search(doc: &mut Document) -> &mut sonde_results::document::SearchEnd {
            match &mut doc.end.section {
                sonde_results::document::Section::Pps(p) => p.search.as_mut().expect("a search"),
                _ => unreachable!("a pps document"),
            }
        }
        assert_eq!(search(&mut doc).confirmed, None);
        search(&mut doc).confirmed = Some(true);
        assert!(!said(&doc), "{}", pps(&doc));
        search(&mut doc).confirmed = Some(false);
        assert!(said(&doc), "{}", pps(&doc));
    }
}
