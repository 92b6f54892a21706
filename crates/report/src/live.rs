//! One line per interval while a test runs, with both sides' view of the same interval.

use sonde_results::{Direction, IntervalSample};

use crate::units::bits_per_second;

fn rate(bytes: u64, s: &IntervalSample) -> String {
    bits_per_second(bytes as f64 * 8.0 / (s.end_s - s.start_s).max(1e-9))
}

/// `[  3.0-  4.0 s] sender 9.41 Gbit/s (client, cpu 48%)  receiver 9.40 Gbit/s (server, cpu 51%)`
pub fn line(
    direction: Direction,
    client: Option<&IntervalSample>,
    server: Option<&IntervalSample>,
) -> String {
    let any = client
        .or(server)
        .expect("a live line needs one side's sample");
    let mut out = format!("[{:6.1}-{:6.1} s]", any.start_s, any.end_s);
    let cpu = |s: &IntervalSample| {
        s.cpu_busy_percent
            .map(|c| format!(", cpu {c:.0}%"))
            .unwrap_or_default()
    };
    let mut part = |label: &str, side: Option<&IntervalSample>, who: &str, sent: bool| match side {
        Some(s) => {
            let (s_bytes, r_bytes) = s.bytes();
            let b = if sent { s_bytes } else { r_bytes };
            out.push_str(&format!("  {label} {:>14} ({who}{})", rate(b, s), cpu(s)));
        }
        None => out.push_str(&format!("  {label} {:>14} ({who})", "-")),
    };
    match direction {
        Direction::Forward => {
            part("sent", client, "client", true);
            part("received", server, "server", false);
        }
        Direction::Reverse => {
            part("sent", server, "server", true);
            part("received", client, "client", false);
        }
        Direction::Bidir => {
            part("c->s sent", client, "client", true);
            part("received", server, "server", false);
            part("| s->c sent", server, "server", true);
            part("received", client, "client", false);
        }
    }
    out
}

fn micros(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e3)
}

/// `[  1.0-  2.0 s]  45123 msg/s  RTT us p50 12.3  p99 25.1  p99.9 40.2  max 110.0  cpu client 50% server 48%`
pub fn rr_line(client: Option<&IntervalSample>, server: Option<&IntervalSample>) -> String {
    let any = client
        .or(server)
        .expect("a live line needs one side's sample");
    let secs = (any.end_s - any.start_s).max(1e-9);
    let mut out = format!("[{:6.1}-{:6.1} s]", any.start_s, any.end_s);
    match client.and_then(|c| c.rr()) {
        Some(c) => {
            out.push_str(&format!(" {:>10.0} msg/s", c.messages as f64 / secs));
            match &c.latency_ns {
                Some(l) => out.push_str(&format!(
                    "  RTT us p50 {}  p99 {}  p99.9 {}  max {}",
                    micros(l.p50),
                    micros(l.p99),
                    micros(l.p999),
                    micros(l.max)
                )),
                None => out.push_str("  no responses"),
            }
        }
        None => out.push_str("  (client sample missing)"),
    }
    let cpu = |s: Option<&IntervalSample>| {
        s.and_then(|s| s.cpu_busy_percent)
            .map_or("-".to_string(), |c| format!("{c:.0}%"))
    };
    out.push_str(&format!(
        "  host cpu client {} server {}",
        cpu(client),
        cpu(server)
    ));
    out
}

/// `[  1.0-  2.0 s]  sent 1234567 pps (client)  received 1200000 pps (server)  97.2 %`
pub fn pps_line(client: Option<&IntervalSample>, server: Option<&IntervalSample>) -> String {
    let any = client
        .or(server)
        .expect("a live line needs one side's sample");
    let rate = |s: Option<&IntervalSample>| {
        s.and_then(|s| Some(s.pps()?.packets as f64 / (s.end_s - s.start_s).max(1e-9)))
    };
    let (tx, rx) = (rate(client), rate(server));
    let fmt = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.0}"));
    let mut out = format!(
        "[{:6.1}-{:6.1} s]  sent {:>10} pps (client)  received {:>10} pps (server)",
        any.start_s,
        any.end_s,
        fmt(tx),
        fmt(rx)
    );
    if let (Some(t), Some(r)) = (tx, rx) {
        if t > 0.0 {
            out.push_str(&format!("  {:.1} % received", r * 100.0 / t));
        }
    }
    out
}

/// `idle      UDP p50 61.2 us  TCP p50 70.1 us  up 9.41 Gbit/s  down -` as each phase ends.
pub fn load_phase_line(r: &sonde_results::document::load::PhaseRun) -> String {
    let p50 = |d: &Option<sonde_results::Document>| {
        d.as_ref()
            .and_then(|d| d.end.rr()?.latency_ns.as_ref())
            .map_or("-".to_string(), |l| format!("{:.1} us", l.p50 as f64 / 1e3))
    };
    let f = r
        .load
        .as_ref()
        .map(sonde_results::document::load::end_load)
        .unwrap_or_default();
    let rate = |v: Option<f64>| v.map_or("-".to_string(), crate::units::bits_per_second);
    let (up, down) = (
        rate(f.upload_bits_per_second),
        rate(f.download_bits_per_second),
    );
    let mut out = format!(
        "{:<9} UDP p50 {:>10}  TCP p50 {:>10}  up {up:>12}  down {down:>12}",
        r.phase.as_str(),
        p50(&r.udp),
        p50(&r.tcp),
    );
    for e in &r.errors {
        out.push_str(&format!("\n  {e}"));
    }
    out
}

/// `[  1.0-  2.0 s]  rx 9.41 Gbit/s  tx 120 Mbit/s  CPU 45 %  softirq 12 %  retrans 0`
pub fn watch_line(i: &sonde_results::document::IntervalFigures) -> String {
    let Some(w) = i.watch() else {
        return String::new();
    };
    let rate = |v: Option<f64>| v.map_or("-".to_string(), crate::units::bits_per_second);
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0} %"));
    let steal = w
        .steal_percent
        .filter(|s| *s >= sonde_results::side::STEAL_NAMED_PERCENT)
        .map_or_else(String::new, |s| format!("  steal {s:.0} %"));
    format!(
        "[{:6.1}-{:6.1} s]  rx {:>13}  tx {:>13}  CPU {:>5}  softirq {:>5}{steal}  retrans {}  irqs {}",
        i.start_s,
        i.end_s,
        rate(w.rx_bits_per_second),
        rate(w.tx_bits_per_second),
        pct(w.cpu_busy_percent),
        pct(w.softirq_percent),
        w.tcp_retransmits.map_or("-".to_string(), |v| v.to_string()),
        w.interrupts.map_or("-".to_string(), |v| v.to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::{RrSample, SampleSection, StreamSample};

    #[test]
    fn a_watch_line_names_the_hypervisors_steal_from_one_percent() {
        use sonde_results::document::watch::WatchInterval;
        use sonde_results::document::{IntervalFigures, IntervalSection};
        let at = |steal: f64| {
            let watch = WatchInterval {
                cpu_busy_percent: Some(80.0),
                softirq_percent: Some(10.0),
                steal_percent: Some(steal),
                ..Default::default()
            };
            watch_line(&IntervalFigures {
                section: IntervalSection::Watch { watch },
                ..IntervalFigures::span(0.0, 1.0)
            })
        };
        assert!(
            at(20.0).contains("CPU  80 %  softirq  10 %  steal 20 %  retrans"),
            "{}",
            at(20.0)
        );
        assert!(!at(0.9).contains("steal"), "{}", at(0.9));
    }

    #[test]
    fn forward_line_names_both_sides() {
        let c = IntervalSample {
            index: 0,
            start_s: 0.0,
            end_s: 1.0,
            cpu_busy_percent: Some(48.0),
            partial: false,
            section: SampleSection::Stream(StreamSample {
                sent_bytes: 1_250_000_000,
                ..Default::default()
            }),
        };
        let l = line(Direction::Forward, Some(&c), None);
        assert!(l.contains("sent   10.00 Gbit/s (client, cpu 48%)"), "{l}");
        assert!(l.contains("received              - (server)"), "{l}");
    }

    #[test]
    fn rr_line_shows_rate_and_round_trip_percentiles() {
        let l = sonde_results::LatencySummary {
            count: 10,
            min: 1_000,
            mean: 2_000.0,
            stddev: 1.0,
            p50: 12_300,
            p90: 20_000,
            p99: 25_100,
            p999: 40_200,
            p9999: 50_000,
            max: 110_000,
            histogram: None,
        };
        let c = IntervalSample {
            index: 1,
            start_s: 1.0,
            end_s: 2.0,
            cpu_busy_percent: Some(50.0),
            partial: false,
            section: SampleSection::Rr(RrSample {
                messages: 45_123,
                latency_ns: Some(l),
                stages: None,
                oneway: None,
            }),
        };
        let line = rr_line(Some(&c), None);
        assert!(line.contains("45123 msg/s"), "{line}");
        assert!(
            line.contains("RTT us p50 12.3  p99 25.1  p99.9 40.2  max 110.0"),
            "{line}"
        );
        assert!(line.contains("client 50% server -"), "{line}");
    }
}
