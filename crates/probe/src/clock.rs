//! This host's clock as a delay measurement needs it: the kernel's NTP state
//! (`adjtimex`, read-only), chrony's tracking (`chronyc -c -n tracking`, read-only), the
//! PTP clocks and VMClock present, the clocksource, and one error bound from them.
//!
//! The readers of text take what the tools print, so captured answers are fixtures; the
//! files under a root are read as under `/`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sonde_results::clock::{ClockBound, ClockState, DaemonClock, KernelClock, PtpClock};

/// `STA_UNSYNC`: the clock is not synchronised.
const STA_UNSYNC: u32 = 0x0040;
/// `STA_NANO`: the offset is in nanoseconds, not microseconds.
const STA_NANO: u32 = 0x2000;
/// `TIME_ERROR`: the clock state `adjtimex` returns when it is not synchronised.
const TIME_ERROR: i64 = 5;
/// How long `chronyc` may take to answer before it is taken as absent.
const CHRONYC_TIMEOUT: Duration = Duration::from_secs(2);

/// The clock of the running host.
pub fn live() -> ClockState {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    assess(
        Path::new("/"),
        adjtimex(),
        chronyc_tracking().as_deref(),
        now,
    )
}

/// The clock state of the tree at `root`, from the kernel's and chrony's answers (`None`:
/// no answer), at `now` (Unix seconds).
pub fn assess(
    root: &Path,
    kernel: Option<KernelClock>,
    tracking: Option<&str>,
    now: f64,
) -> ClockState {
    let daemon = tracking.and_then(|t| parse_tracking(t, now));
    let bound = match (&daemon, &kernel) {
        (Some(d), _) => ClockBound::of_daemon(d),
        (None, Some(k)) => ClockBound::of_kernel(k),
        (None, None) => ClockBound::unknown(),
    };
    ClockState {
        clocksource: text(
            root,
            "sys/devices/system/clocksource/clocksource0/current_clocksource",
        ),
        kernel,
        daemon,
        ptp: ptp_clocks(root),
        vmclock: root.join("dev/vmclock0").exists(),
        bound,
    }
}

/// The clock state of a captured tree: the kernel's and chrony's answers as the tools
/// printed them, in `captured/adjtimex-p.txt` and `captured/chronyc-c-tracking.csv`.
pub fn captured(root: &Path, now: f64) -> ClockState {
    let read = |f: &str| std::fs::read_to_string(root.join("captured").join(f)).ok();
    let kernel = read("adjtimex-p.txt").and_then(|t| parse_adjtimex_print(&t));
    assess(root, kernel, read("chronyc-c-tracking.csv").as_deref(), now)
}

/// `adjtimex(2)` with no mode bits: reads the kernel's NTP state, changes nothing.
pub fn adjtimex() -> Option<KernelClock> {
    // SAFETY: all-zero is a valid timex; modes 0 only reads.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: tx is live and writable.
    let state = unsafe { libc::adjtimex(&mut tx) };
    if state < 0 {
        return None;
    }
    Some(kernel_clock(
        tx.status as u32,
        state as i64,
        (tx.offset, tx.freq),
        (tx.maxerror, tx.esterror),
    ))
}

/// The kernel's state from its fields: `freq` in ppm scaled by 2^16, `offset` in µs or
/// (`STA_NANO`) ns.
fn kernel_clock(
    status: u32,
    state: i64,
    (offset, freq): (i64, i64),
    errors: (i64, i64),
) -> KernelClock {
    KernelClock {
        synchronised: status & STA_UNSYNC == 0 && state != TIME_ERROR,
        status,
        offset_ns: if status & STA_NANO != 0 {
            offset
        } else {
            offset * 1_000
        },
        frequency_ppm: freq as f64 / 65_536.0,
        maxerror_us: errors.0,
        esterror_us: errors.1,
    }
}

/// The state as `adjtimex -p` (Debian's adjtimex) prints it: `status: 64`, `return value = 5`.
pub fn parse_adjtimex_print(text: &str) -> Option<KernelClock> {
    let field = |name: &str| -> Option<i64> {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':').or_else(|| l.split_once('='))?;
            (k.trim() == name).then(|| v.trim().parse().ok()).flatten()
        })
    };
    Some(kernel_clock(
        field("status")? as u32,
        field("return value")?,
        (field("offset")?, field("frequency")?),
        (field("maxerror")?, field("esterror")?),
    ))
}

/// chrony's tracking as `chronyc -c -n tracking` prints it (one CSV line), at `now`.
pub fn parse_tracking(csv: &str, now: f64) -> Option<DaemonClock> {
    let f: Vec<&str> = csv.lines().next()?.split(',').collect();
    if f.len() < 14 {
        return None;
    }
    let num = |i: usize| f[i].trim().parse::<f64>().ok();
    let ns = |i: usize| num(i).map(|s| (s * 1e9).round() as i64);
    let ref_time = num(3)?;
    Some(DaemonClock {
        daemon: "chrony".into(),
        reference: if f[1].is_empty() { f[0] } else { f[1] }.to_string(),
        stratum: f[2].trim().parse().ok()?,
        system_offset_ns: ns(4)?,
        last_offset_ns: ns(5)?,
        root_delay_ns: ns(10)?.unsigned_abs(),
        root_dispersion_ns: ns(11)?.unsigned_abs(),
        frequency_ppm: num(7)?,
        since_update_s: if ref_time > 0.0 {
            (now - ref_time).max(0.0)
        } else {
            0.0
        },
        leap: f[13].trim().to_string(),
    })
}

/// `chronyc -c -n tracking`, when chrony is installed and its daemon answers in time.
fn chronyc_tracking() -> Option<String> {
    let mut child = Command::new("chronyc")
        .args(["-c", "-n", "tracking"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + CHRONYC_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(Some(_)) | Err(_) => return None,
            Ok(None) if std::time::Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take()?, &mut out).ok()?;
    Some(out)
}

/// The PTP clocks under `root`'s `/sys/class/ptp`, by device.
fn ptp_clocks(root: &Path) -> Vec<PtpClock> {
    let Ok(dir) = std::fs::read_dir(root.join("sys/class/ptp")) else {
        return Vec::new();
    };
    let mut clocks: Vec<PtpClock> = dir
        .filter_map(|e| {
            let device = e.ok()?.file_name().into_string().ok()?;
            let name = text(root, &format!("sys/class/ptp/{device}/clock_name"))?;
            Some(PtpClock { device, name })
        })
        .collect();
    clocks.sort_by(|a, b| a.device.cmp(&b.device));
    clocks
}

fn text(root: &Path, rel: &str) -> Option<String> {
    let s = std::fs::read_to_string(root.join(rel)).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/clock");

    fn captured(tree: &str) -> ClockState {
        // The captures' time plus ten seconds.
        super::captured(&Path::new(FIXTURES).join(tree), 1_795_784_700.0)
    }

    #[test]
    fn an_unsynchronised_kernel_without_a_daemon_has_no_bound() {
        let c = captured("unsynced-no-daemon");
        let k = c.kernel.as_ref().unwrap();
        assert_eq!(
            (k.synchronised, k.status, k.maxerror_us),
            (false, 64, 16_000_000)
        );
        assert!(c.daemon.is_none());
        assert_eq!((c.bound.synchronised, c.bound.error_ns), (false, None));
        assert!(c.bound.how.contains("STA_UNSYNC"), "{}", c.bound.how);
        assert_eq!(c.clocksource.as_deref(), Some("kvm-clock"));
    }

    #[test]
    fn chrony_synchronised_gives_clockbounds_bound() {
        let c = captured("chrony-local");
        let d = c.daemon.as_ref().unwrap();
        assert_eq!((d.stratum, d.leap.as_str()), (8, "Normal"));
        assert_eq!(d.reference, "7F7F0101");
        // Updated 9.85 s before `now`: 50 ppm of that is the whole bound (its root delay
        // and dispersion are 0: a local reference).
        assert!((d.since_update_s - 9.85).abs() < 0.01, "{d:?}");
        let e = c.bound.error_ns.unwrap();
        assert!((492_000..=493_000).contains(&e), "{e}");
        assert_eq!(c.bound.from, "chrony");
    }

    #[test]
    fn chrony_not_synchronised_says_so() {
        let c = captured("chrony-unsynced");
        assert_eq!(c.daemon.as_ref().unwrap().leap, "Not synchronised");
        assert_eq!((c.bound.synchronised, c.bound.error_ns), (false, None));
    }

    #[test]
    fn ptp_clocks_and_vmclock_are_listed() {
        let c = captured("ptp-vmclock");
        let names: Vec<_> = c
            .ptp
            .iter()
            .map(|p| (p.device.as_str(), p.name.as_str()))
            .collect();
        assert_eq!(names, [("ptp0", "hyperv"), ("ptp1", "mlx5_ptp")]);
        assert!(c.vmclock);
        assert!(!captured("unsynced-no-daemon").vmclock);
    }

    #[test]
    fn the_live_reading_changes_nothing_and_agrees_with_itself() {
        let a = adjtimex().expect("adjtimex reads");
        let b = adjtimex().expect("adjtimex reads");
        assert_eq!((a.status, a.synchronised), (b.status, b.synchronised));
    }
}
