//! `sonde clock` in words: the bound first, then where it comes from.

use std::fmt::Write;

use sonde_results::clock::ClockState;

/// The clock state as `sonde clock` prints it (and `sonde host` under its clocksource).
pub fn render(c: &ClockState) -> String {
    let mut o = String::new();
    let b = &c.bound;
    let bound = match b.error_ns {
        Some(ns) => format!("± {:.1} us (from {}: {})", ns as f64 / 1e3, b.from, b.how),
        None => format!("not synchronised ({})", b.how),
    };
    let _ = writeln!(o, "clock error bound  {bound}");
    if let Some(k) = &c.kernel {
        let _ = writeln!(
            o,
            "kernel (adjtimex)  {}, offset {:.1} us, frequency {:+.3} ppm, maxerror {} us, esterror {} us, status 0x{:04x}",
            if k.synchronised { "synchronised" } else { "unsynchronised" },
            k.offset_ns as f64 / 1e3,
            k.frequency_ppm,
            k.maxerror_us,
            k.esterror_us,
            k.status,
        );
    }
    match &c.daemon {
        Some(d) => {
            let _ = writeln!(
                o,
                "{:<18} reference {} stratum {}, {}, system offset {:+.1} us, root delay {:.1} us, root dispersion {:.1} us, updated {:.0} s ago",
                d.daemon,
                d.reference,
                d.stratum,
                d.leap,
                d.system_offset_ns as f64 / 1e3,
                d.root_delay_ns as f64 / 1e3,
                d.root_dispersion_ns as f64 / 1e3,
                d.since_update_s,
            );
        }
        None => {
            let _ = writeln!(o, "time daemon        none answered (chronyc)");
        }
    }
    for p in &c.ptp {
        let _ = writeln!(o, "PTP clock          {} ({})", p.device, p.name);
    }
    if c.vmclock {
        let _ = writeln!(o, "VMClock            /dev/vmclock0");
    }
    if let Some(cs) = &c.clocksource {
        let _ = writeln!(o, "clocksource        {cs}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::clock::{ClockBound, DaemonClock, KernelClock, PtpClock};

    #[test]
    fn the_bound_comes_first_with_where_it_comes_from() {
        let d = DaemonClock {
            daemon: "chrony".into(),
            reference: "169.254.169.123".into(),
            stratum: 4,
            root_delay_ns: 300_000,
            leap: "Normal".into(),
            ..Default::default()
        };
        let c = ClockState {
            bound: ClockBound::of_daemon(&d),
            daemon: Some(d),
            kernel: Some(KernelClock {
                synchronised: true,
                ..Default::default()
            }),
            ptp: vec![PtpClock {
                device: "ptp0".into(),
                name: "hyperv".into(),
            }],
            ..Default::default()
        };
        let text = render(&c);
        assert!(
            text.starts_with("clock error bound  ± 150.0 us (from chrony"),
            "{text}"
        );
        assert!(
            text.contains("reference 169.254.169.123 stratum 4, Normal"),
            "{text}"
        );
        assert!(text.contains("PTP clock          ptp0 (hyperv)"), "{text}");
        let lost = ClockState {
            bound: ClockBound::unknown(),
            ..Default::default()
        };
        assert!(render(&lost).starts_with("clock error bound  not synchronised"));
    }
}
