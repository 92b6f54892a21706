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
            let b = if sent { s.sent_bytes } else { s.received_bytes };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_line_names_both_sides() {
        let c = IntervalSample {
            index: 0,
            start_s: 0.0,
            end_s: 1.0,
            sent_bytes: 1_250_000_000,
            received_bytes: 0,
            cpu_busy_percent: Some(48.0),
        };
        let l = line(Direction::Forward, Some(&c), None);
        assert!(l.contains("sent   10.00 Gbit/s (client, cpu 48%)"), "{l}");
        assert!(l.contains("received              - (server)"), "{l}");
    }
}
