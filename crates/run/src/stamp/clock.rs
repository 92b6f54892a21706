//! What a STAMP packet says of this host's clock, from `sonde clock`'s state: the Error
//! Estimate (S set only when the clock is synchronised, the error its bound by ClockBound's
//! recipe, else the largest the field holds) and the Timestamp Information TLV's source.
//! Kept in one atomic word that a slow reader (chronyc takes up to 2 s) refreshes beside
//! the packet loop, which never waits for it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sonde_proto::stamp::{ErrorEstimate, SyncSource, TimeFormat};
use sonde_results::clock::ClockState;

/// How often the clock's state is read again.
pub const REFRESH: Duration = Duration::from_secs(10);

/// The estimate and the source a clock state gives.
pub fn of_state(state: &ClockState) -> (ErrorEstimate, SyncSource) {
    let bound = &state.bound;
    match (bound.synchronised, bound.error_ns) {
        (true, Some(ns)) => (
            ErrorEstimate::from_bound_ns(ns, true, TimeFormat::Ntp),
            source(state),
        ),
        _ => (
            ErrorEstimate::unknown(TimeFormat::Ntp),
            SyncSource::LocalFreeRunning,
        ),
    }
}

/// PTP when the daemon follows a PTP hardware clock (chrony's `PHC` reference), else NTP.
fn source(state: &ClockState) -> SyncSource {
    let phc = state
        .daemon
        .as_ref()
        .is_some_and(|d| d.reference.to_ascii_uppercase().starts_with("PHC"));
    if phc {
        SyncSource::Ptp
    } else {
        SyncSource::Ntp
    }
}

/// The clock's figures, shared by the packet loop and the thread that refreshes them.
#[derive(Clone)]
pub struct Shared(Arc<AtomicU32>);

impl Shared {
    pub fn new(state: &ClockState) -> Self {
        let shared = Shared(Arc::new(AtomicU32::new(0)));
        shared.set(state);
        shared
    }

    pub fn set(&self, state: &ClockState) {
        let (estimate, source) = of_state(state);
        let word = u32::from(estimate.to_bits()) << 8 | u32::from(source.code());
        self.0.store(word, Ordering::Relaxed);
    }

    pub fn get(&self) -> (ErrorEstimate, SyncSource) {
        let word = self.0.load(Ordering::Relaxed);
        (
            ErrorEstimate::from_bits((word >> 8) as u16),
            SyncSource::from_code(word as u8),
        )
    }
}

/// This host's kernel boot id (`/proc/sys/kernel/random/boot_id`): a sonde reflector tells
/// it a sonde sender, so that two ends on one host know they read one clock.
pub fn boot_id() -> Option<[u8; sonde_proto::stamp::tlv::BOOT_ID_BYTES]> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    sonde_proto::stamp::tlv::boot_id_from_text(&text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::clock::{ClockBound, DaemonClock};

    #[test]
    fn a_synchronised_clock_sends_its_bound_an_unsynchronised_one_no_s_bit() {
        let mut state = ClockState {
            bound: ClockBound {
                synchronised: true,
                error_ns: Some(702_000),
                ..Default::default()
            },
            daemon: Some(DaemonClock {
                reference: "C0A80001".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (est, src) = of_state(&state);
        assert!(est.synchronized && src == SyncSource::Ntp);
        let bound = est.bound_ns().unwrap();
        assert!(
            (702_000..=702_000 + 702_000 / 127).contains(&bound),
            "{bound}"
        );
        state.daemon.as_mut().unwrap().reference = "PHC0".into();
        assert_eq!(of_state(&state).1, SyncSource::Ptp);
        let shared = Shared::new(&state);
        assert_eq!(shared.get(), of_state(&state));
        state.bound = ClockBound::unknown();
        let (est, src) = of_state(&state);
        assert!(!est.synchronized && src == SyncSource::LocalFreeRunning);
        assert_eq!(est.to_bits(), 0x3fff);
    }
}
