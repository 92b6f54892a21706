//! A STAMP run's heading and summary: round trips, each direction's delay ± bound, loss
//! (by direction against a stateful reflector), reordering, duplicates and the
//! reflector's clock.

use sonde_results::document::stamp::StampEnd;
use sonde_results::{Document, StampSpec};

use super::common::{footer, table};
use crate::units::sig3;

/// `sonde stamp: 198.18.0.2:862, 100 packets/s x 44 B, unauthenticated, 5 s`.
pub fn stamp_heading(s: &StampSpec) -> String {
    let count = s
        .count
        .map_or(String::new(), |c| format!(", {c} packets at most"));
    format!(
        "sonde stamp: {}:{}, {} packets/s x {} B, {}, {:.1} s{count}",
        s.host,
        s.port,
        sig3(s.rate_per_s),
        s.packet_bytes,
        if s.authenticated {
            "authenticated"
        } else {
            "unauthenticated"
        },
        s.timing.duration_ms as f64 / 1e3
    )
}

fn us(ns: u64) -> String {
    format!("{} us", sig3(ns as f64 / 1e3))
}

/// The loss line: in all, then by direction when the reflector numbers its answers.
pub fn loss_words(e: &StampEnd) -> String {
    let pct = if e.sent > 0 {
        100.0 * e.lost as f64 / e.sent as f64
    } else {
        0.0
    };
    let mut w = format!("{} of {} ({:.2} %)", e.lost, e.sent, pct);
    if let (Some(f), Some(r)) = (e.lost_forward, e.lost_reverse) {
        w.push_str(&format!(": {f} on the way there, {r} on the way back"));
        if let Some(a) = e.lost_after_last_answer.filter(|&a| a > 0) {
            w.push_str(&format!(", {a} after the last answer (either way)"));
        }
    }
    w
}

/// Where T1 came from: `kernel (driver) 100 of 100, send path P50 6.2 us`.
fn send_stamps(e: &StampEnd) -> String {
    let mut w = format!("kernel (driver) {} of {}", e.sent_kernel_stamped, e.sent);
    if let Some(p) = &e.send_path_ns {
        w.push_str(&format!(", send path P50 {}", us(p.p50)));
    }
    if e.answers_clock_timed > 0 {
        w.push_str(&format!(
            ", {} answers timed from a clock read",
            e.answers_clock_timed
        ));
    }
    w
}

/// Human summary of a STAMP run.
pub fn stamp(doc: &Document) -> String {
    let Some(e) = doc.end.stamp() else {
        return footer(&doc.end);
    };
    if let Some(why) = e.no_answer {
        // Nothing answered: no table of figures no answer gave.
        return format!(
            "no answer from {}: {} packets sent, none answered; {}\n{}",
            e.reflector,
            e.sent,
            why.words(e),
            footer(&doc.end)
        );
    }
    let mut t = table(vec!["STAMP", "value"]);
    let rtt = e.latency_ns.as_ref().map_or("-".into(), |l| {
        format!(
            "P50 {}, P99 {}, P99.9 {}, max {}",
            us(l.p50),
            us(l.p99),
            us(l.p999),
            us(l.max)
        )
    });
    let reflector_clock = match e.clock.as_ref().map(|c| (c.synchronized, c.error_ns)) {
        Some((true, Some(b))) => format!("synchronised, ± {}", us(b)),
        Some(_) => "reflector not synchronised (its S bit is unset)".into(),
        None => "-".into(),
    };
    let rows = [
        (
            "reflector",
            format!(
                "{}{}",
                e.reflector,
                if e.stateful { " (stateful)" } else { "" }
            ),
        ),
        ("round trip", rtt),
        ("lost", loss_words(e)),
        (
            "reordered / duplicates",
            format!("{} / {}", e.reordered, e.duplicates),
        ),
        ("reflector's clock", reflector_clock),
        ("send stamps", send_stamps(e)),
    ];
    for (k, v) in rows {
        t.add_row(vec![k.to_string(), v]);
    }
    let fate = e.marks.as_deref().cloned().unwrap_or_default();
    for (k, way) in [
        ("marks forward", &fate.forward),
        ("marks reverse", &fate.reverse),
    ] {
        if let Some(w) = way {
            t.add_row(vec![k.to_string(), w.counts_line()]);
        }
    }
    let mut out = format!("{t}\n");
    for w in fate.words() {
        out.push_str(&format!("marks: {w}\n"));
    }
    if let Some(o) = &e.oneway {
        out.push_str(&format!("{}\n", o.line()));
    }
    for n in &e.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out.push_str(&footer(&doc.end));
    out
}

/// A STAMP run's one figure in `sonde results list`: its P50 and what was lost.
pub(crate) fn listed(e: &sonde_results::document::End) -> String {
    let Some(stamp) = e.stamp() else {
        return "-".into();
    };
    match &stamp.latency_ns {
        Some(l) => format!("P50 {} us, lost {}", sig3(l.p50 as f64 / 1e3), stamp.lost),
        None => format!("lost {}", stamp.lost),
    }
}
