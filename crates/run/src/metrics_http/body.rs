//! The `/metrics` body, without I/O: rendered at most once per period and shared by every
//! connection that asks within it (a mesh of 10,000 peers renders 24 MB: a copy per
//! connection let 64 never-read GETs take a gigabyte), and the byte budget for the bodies
//! connections are still being written: beyond it the connections holding the oldest
//! bodies are closed, so that memory stays within [`WRITE_BUDGET`] and the current body.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of bodies held for connections being written, all together (each body counted
/// once however many connections share it); the current body is always served, and
/// older ones are let go, their connections closed, oldest first, beyond it.
pub const WRITE_BUDGET: usize = 64 << 20;

/// One rendering of the metrics, shared by the connections it is written to.
pub struct Rendered {
    /// Renderings count from 1; a higher number is younger.
    pub generation: u64,
    pub bytes: Box<[u8]>,
}

/// What renders the body, and its last rendering.
pub struct Bodies {
    render: Box<dyn Fn() -> String + Send>,
    /// How long a rendering is served before the next request renders again (zero:
    /// every request renders).
    period: Duration,
    /// The last rendering, and until when it is served.
    current: Option<(Instant, Arc<Rendered>)>,
    generation: u64,
}

impl Bodies {
    pub fn new(render: Box<dyn Fn() -> String + Send>, period: Duration) -> Bodies {
        Bodies {
            render,
            period,
            current: None,
            generation: 0,
        }
    }

    /// The body to answer a request at `now`: the last rendering until a period after
    /// it was made, else a new one. A rendering slower than the period is served for as
    /// long as it took (the thread renders half of its time at most: 64 requests in a
    /// row rendered a 44 MB body each, 3 s a piece in a debug build).
    pub fn get(&mut self, now: Instant) -> Arc<Rendered> {
        if let Some((until, body)) = &self.current {
            if now < *until {
                return Arc::clone(body);
            }
        }
        // The last rendering is let go before the next is made: one fewer body at once.
        self.current = None;
        self.generation += 1;
        let body = Arc::new(Rendered {
            generation: self.generation,
            bytes: (self.render)().into_bytes().into_boxed_slice(),
        });
        let done = Instant::now().max(now);
        let until = match self.period.is_zero() {
            true => now,
            false => done + self.period.max(done - now),
        };
        self.current = Some((until, Arc::clone(&body)));
        body
    }

    /// The generation of the rendering a new request would get now, if any.
    pub fn current_generation(&self) -> Option<u64> {
        self.current.as_ref().map(|(_, b)| b.generation)
    }
}

/// Which connections to close so that the bodies held stay within `budget`: `held` is,
/// for each connection, the body it is being written (generation and length), or none.
/// The `current` generation is never let go; the oldest others go first, each with every
/// connection that holds it.
pub fn over_budget(
    held: &[Option<(u64, usize)>],
    current: Option<u64>,
    budget: usize,
) -> Vec<bool> {
    let mut bodies: Vec<(u64, usize)> = held.iter().flatten().copied().collect();
    bodies.sort_unstable();
    bodies.dedup_by_key(|b| b.0);
    let mut total: usize = bodies.iter().map(|b| b.1).sum();
    let mut dropped = Vec::new();
    for &(generation, len) in &bodies {
        if total <= budget {
            break;
        }
        if Some(generation) == current {
            continue;
        }
        total -= len;
        dropped.push(generation);
    }
    held.iter()
        .map(|h| h.is_some_and(|(g, _)| dropped.contains(&g)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_body_is_rendered_once_a_period_and_shared() {
        let renders = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&renders);
        let mut bodies = Bodies::new(
            Box::new(move || {
                counted.fetch_add(1, Ordering::Relaxed);
                "a 1\n# EOF\n".into()
            }),
            Duration::from_secs(1),
        );
        let t0 = Instant::now();
        let a = bodies.get(t0);
        let b = bodies.get(t0 + Duration::from_millis(999));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(renders.load(Ordering::Relaxed), 1);
        // A period after the rendering was done (a moment after t0).
        let c = bodies.get(t0 + Duration::from_secs(2));
        assert!(!Arc::ptr_eq(&a, &c) && c.generation == 2);
        assert_eq!(&*c.bytes, b"a 1\n# EOF\n");
        assert_eq!(bodies.current_generation(), Some(2));
        // Period zero: every request renders.
        let mut each = Bodies::new(Box::new(String::new), Duration::ZERO);
        assert_ne!(each.get(t0).generation, each.get(t0).generation);
    }

    #[test]
    fn beyond_the_budget_the_oldest_bodies_go_with_all_their_connections() {
        // Three generations of 30 bytes over five connections, a budget of 70.
        let held = [
            Some((1, 30)),
            None,
            Some((2, 30)),
            Some((1, 30)),
            Some((3, 30)),
        ];
        assert_eq!(
            over_budget(&held, Some(3), 70),
            [true, false, false, true, false]
        );
        // Within the budget nothing goes; the current body stays even alone beyond it.
        assert_eq!(over_budget(&held, Some(3), 90), [false; 5]);
        assert_eq!(
            over_budget(&held, Some(1), 10),
            [false, false, true, false, true]
        );
        assert_eq!(over_budget(&[], None, 0), Vec::<bool>::new());
    }
}
