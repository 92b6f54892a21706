//! When an agent's STAMP run gives up for want of answers: a run a controller asked of an
//! agent went on for its whole length against a port that never answered (the red team's
//! 571 Mbit/s at a DNS server's port inside `--stamp-targets`, issue 52 L4). As a client
//! part stops after three unanswered challenges, the run stops once [`limit`] passes
//! without one valid answer, from its start or its last answer. Sans-IO: instants in.

use std::time::{Duration, Instant};

/// The least silence that stops a run: a reflector a few hops away, or busy, still
/// answers within it.
pub const SILENCE: Duration = Duration::from_secs(3);

/// How long a run at one packet per `gap`, waiting `timeout` for each answer, may go
/// without one: [`SILENCE`] or three packets' time, whichever is longer, and the last one's
/// wait.
pub fn limit(gap: Duration, timeout: Duration) -> Duration {
    SILENCE.max(gap * 3) + timeout
}

/// The time since the last answer (or the start).
#[derive(Debug, Clone, Copy)]
pub struct Silence {
    limit: Duration,
    since: Instant,
}

impl Silence {
    pub fn new(limit: Duration, start: Instant) -> Silence {
        Silence {
            limit,
            since: start,
        }
    }

    /// A valid answer came at `now`.
    pub fn heard(&mut self, now: Instant) {
        self.since = self.since.max(now);
    }

    /// Whether the run should stop at `now`.
    pub fn over(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.since) >= self.limit
    }

    pub fn limit(&self) -> Duration {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_stops_after_the_limit_without_an_answer_and_an_answer_restarts_it() {
        let ms = Duration::from_millis;
        // 10/s, a 1 s wait: 4 s; 0.2/s: three packets' 15 s and the wait.
        assert_eq!(limit(ms(100), ms(1000)), ms(4000));
        assert_eq!(limit(ms(5000), ms(1000)), ms(16_000));
        let t0 = Instant::now();
        let mut s = Silence::new(ms(4000), t0);
        assert!(!s.over(t0 + ms(3999)));
        assert!(s.over(t0 + ms(4000)));
        s.heard(t0 + ms(3000));
        assert!(!s.over(t0 + ms(6999)) && s.over(t0 + ms(7000)));
        // An answer read late (its instant earlier than the last) moves nothing back.
        s.heard(t0 + ms(1000));
        assert!(!s.over(t0 + ms(6999)));
    }
}
