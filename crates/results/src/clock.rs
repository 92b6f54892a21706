//! A host's clock as a delay measurement needs it (`sonde clock`): the kernel's NTP state,
//! the time daemon's view, the PTP clocks and VMClock present, the clocksource, and one
//! bound on the clock's error from them, or "not synchronised".

use serde::{Deserialize, Serialize};

/// Drift assumed since the daemon's last update, as AWS ClockBound assumes: 50 ppm, well
/// above a disciplined clock's residual frequency error (a few ppm).
pub const MAX_DRIFT_PPM: f64 = 50.0;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClockState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clocksource: Option<String>,
    /// The kernel's NTP state (`adjtimex`), when it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelClock>,
    /// The time daemon's view (chrony), when one answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon: Option<DaemonClock>,
    /// PTP hardware clocks (`/sys/class/ptp`): a NIC's, the hypervisor's (`hyperv`,
    /// `kvm-ptp`), ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ptp: Vec<PtpClock>,
    /// The hypervisor's VMClock device (`/dev/vmclock0`, Linux 6.13+).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub vmclock: bool,
    pub bound: ClockBound,
}

/// `adjtimex(2)` read without changing anything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelClock {
    /// Neither `STA_UNSYNC` set nor the clock state `TIME_ERROR`.
    pub synchronised: bool,
    /// The status word (`STA_*` bits).
    pub status: u32,
    pub offset_ns: i64,
    pub frequency_ppm: f64,
    /// The kernel's maximum and estimated error, as the daemon set them (µs).
    pub maxerror_us: i64,
    pub esterror_us: i64,
}

/// chrony's `tracking`, read-only.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DaemonClock {
    pub daemon: String,
    pub reference: String,
    pub stratum: u32,
    /// How far the system clock is from the daemon's estimate of true time (+: fast).
    pub system_offset_ns: i64,
    pub last_offset_ns: i64,
    pub root_delay_ns: u64,
    pub root_dispersion_ns: u64,
    pub frequency_ppm: f64,
    /// Since the daemon last updated the clock from its reference.
    pub since_update_s: f64,
    /// `Normal`, `Insert second`, `Delete second` or `Not synchronised`.
    pub leap: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PtpClock {
    pub device: String,
    pub name: String,
}

/// The clock's error bound, and where it comes from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClockBound {
    pub synchronised: bool,
    /// `None` when the clock is not synchronised: no bound holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_ns: Option<u64>,
    /// `chrony` or `kernel` (its `maxerror`), or what said it is not synchronised.
    pub from: String,
    /// The recipe, in words.
    pub how: String,
}

impl ClockBound {
    /// ClockBound's recipe from the daemon's tracking: |system offset| + root dispersion +
    /// root delay / 2 + [`MAX_DRIFT_PPM`] over the time since its last update.
    pub fn of_daemon(d: &DaemonClock) -> ClockBound {
        if d.leap == "Not synchronised" {
            return ClockBound {
                synchronised: false,
                error_ns: None,
                from: d.daemon.clone(),
                how: format!("{} says it is not synchronised", d.daemon),
            };
        }
        let drift = MAX_DRIFT_PPM * 1e3 * d.since_update_s.max(0.0);
        let error = d.system_offset_ns.unsigned_abs() as f64
            + d.root_dispersion_ns as f64
            + d.root_delay_ns as f64 / 2.0
            + drift;
        ClockBound {
            synchronised: true,
            error_ns: Some(error.round() as u64),
            from: d.daemon.clone(),
            how: format!(
                "|offset| {} + root dispersion {} + root delay/2 {} + {MAX_DRIFT_PPM} ppm over {:.0} s since the last update {}",
                us(d.system_offset_ns.unsigned_abs() as f64),
                us(d.root_dispersion_ns as f64),
                us(d.root_delay_ns as f64 / 2.0),
                d.since_update_s,
                us(drift),
            ),
        }
    }

    /// The kernel's own bound when no daemon answered: its `maxerror`, which the daemon
    /// keeps and the kernel grows by 500 ppm between updates.
    pub fn of_kernel(k: &KernelClock) -> ClockBound {
        match k.synchronised {
            true => ClockBound {
                synchronised: true,
                error_ns: Some(k.maxerror_us.max(0) as u64 * 1_000),
                from: "kernel".into(),
                how: "the kernel's maxerror (no daemon answered)".into(),
            },
            false => ClockBound {
                synchronised: false,
                error_ns: None,
                from: "kernel".into(),
                how: "the kernel says the clock is unsynchronised (STA_UNSYNC)".into(),
            },
        }
    }

    /// Nothing to go on.
    pub fn unknown() -> ClockBound {
        ClockBound {
            synchronised: false,
            error_ns: None,
            from: "none".into(),
            how: "neither the kernel's NTP state nor a time daemon could be read".into(),
        }
    }
}

fn us(ns: f64) -> String {
    format!("{:.1} us", ns / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracking(leap: &str) -> DaemonClock {
        DaemonClock {
            daemon: "chrony".into(),
            system_offset_ns: -2_000,
            root_delay_ns: 300_000,
            root_dispersion_ns: 50_000,
            since_update_s: 10.0,
            leap: leap.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_daemons_bound_is_clockbounds_recipe() {
        let b = ClockBound::of_daemon(&tracking("Normal"));
        // 2 us + 50 us + 150 us + 50 ppm x 10 s (500 us).
        assert_eq!(b.error_ns, Some(702_000));
        assert!(b.synchronised && b.from == "chrony", "{b:?}");
        assert!(b.how.contains("root delay/2 150.0 us"), "{}", b.how);
        let b = ClockBound::of_daemon(&tracking("Not synchronised"));
        assert_eq!((b.synchronised, b.error_ns), (false, None));
    }

    #[test]
    fn the_kernels_bound_is_its_maxerror_or_none() {
        let mut k = KernelClock {
            synchronised: true,
            maxerror_us: 12_345,
            ..Default::default()
        };
        assert_eq!(ClockBound::of_kernel(&k).error_ns, Some(12_345_000));
        k.synchronised = false;
        assert_eq!(ClockBound::of_kernel(&k).error_ns, None);
    }
}
