//! Refused connections, logged without flooding the log: a source's first refusal of each
//! kind in a window is logged in full, the rest are counted and summarised when the window
//! ends ("1,204 connections from 198.18.200.10 refused in the last 10 s: busy"). A churning
//! peer once wrote 39,425 lines (5.3 MB) in 5 s; now at most two lines per source and kind
//! per window, for at most [`SOURCES`] of them, and one line for the rest.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the counts are summarised.
pub(super) const WINDOW: Duration = Duration::from_secs(10);
/// Sources and kinds tracked in a window; refusals beyond are summed into one count.
const SOURCES: usize = 64;

/// What a connection was refused for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    /// No handshake place (answered "busy").
    Busy,
    /// Ended before its `Setup`: silent, late, garbage, the wrong key.
    Handshake,
    /// A data connection not from the controller, without the cookie, or silent.
    Data,
}

impl Kind {
    fn words(self) -> &'static str {
        match self {
            Kind::Busy => "busy",
            Kind::Handshake => "the handshake failed",
            Kind::Data => "not the test's data connection",
        }
    }
}

#[derive(Debug)]
struct Window {
    since: Instant,
    counts: HashMap<(IpAddr, Kind), u64>,
    others: u64,
}

/// The refusals of the current window.
#[derive(Debug)]
pub(super) struct Refusals(Mutex<Window>);

impl Default for Refusals {
    fn default() -> Self {
        Refusals(Mutex::new(Window {
            since: Instant::now(),
            counts: HashMap::new(),
            others: 0,
        }))
    }
}

impl Refusals {
    /// Counts a refusal of a connection from `ip`; logs `line` if it is the first of its
    /// source and kind in this window.
    pub(super) fn refused(&self, ip: IpAddr, kind: Kind, line: impl FnOnce() -> String) {
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let tracked = w.counts.len();
        match w.counts.get_mut(&(ip, kind)) {
            Some(n) => *n += 1,
            None if tracked < SOURCES => {
                w.counts.insert((ip, kind), 1);
                drop(w);
                let text = line();
                tracing::info!("{text}");
            }
            None => w.others += 1,
        }
    }

    /// Summarises and starts a new window if the current one is over.
    pub(super) fn tick(&self, now: Instant) {
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if now.saturating_duration_since(w.since) >= WINDOW {
            summarise(&mut w, now);
        }
    }

    /// Summarises what the window holds, however short (when the agent stops).
    pub(super) fn flush(&self) {
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        summarise(&mut w, Instant::now());
    }
}

/// One line per source and kind refused more than once (once was logged in full), one for
/// the untracked rest; then an empty window from `now`.
fn summarise(w: &mut Window, now: Instant) {
    let secs = now.saturating_duration_since(w.since).as_secs_f64();
    let mut counts: Vec<_> = w.counts.drain().filter(|(_, n)| *n > 1).collect();
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    for ((ip, kind), n) in counts {
        tracing::info!(
            "{} connections from {ip} refused in the last {secs:.0} s: {}",
            thousands(n),
            kind.words()
        );
    }
    if w.others > 0 {
        tracing::info!(
            "{} more connections refused in the last {secs:.0} s from sources past the first {SOURCES}",
            thousands(w.others)
        );
    }
    w.others = 0;
    w.since = now;
}

/// `1204` as `1,204`, as the reports write counts.
fn thousands(n: u64) -> String {
    sonde_report::units::thousands(i64::try_from(n).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_written_with_thousands_separators() {
        assert_eq!(thousands(7), "7");
        assert_eq!(thousands(1204), "1,204");
        assert_eq!(thousands(39_425_000), "39,425,000");
    }

    #[test]
    fn a_window_tracks_a_bounded_number_of_sources_and_counts_the_rest() {
        let r = Refusals::default();
        let mut logged = 0;
        for k in 0..200u32 {
            let ip = IpAddr::from((0x7f00_0000 + k % 100).to_be_bytes());
            r.refused(ip, Kind::Busy, || {
                logged += 1;
                String::new()
            });
        }
        assert_eq!(logged, SOURCES);
        let w = r.0.lock().unwrap();
        assert_eq!(w.counts.len(), SOURCES);
        assert_eq!(w.counts.values().sum::<u64>(), 2 * SOURCES as u64);
        assert_eq!(w.others, 200 - 2 * SOURCES as u64);
    }
}
