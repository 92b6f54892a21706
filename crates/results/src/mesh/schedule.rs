//! Due times per key on a min-heap, so that a wake-up costs the keys due, not the keys
//! held: the mesh's prober keeps one for each peer's next probe and one for each peer's
//! next settling, its keys the peers' slots (small numbers, reused: a key's time is an
//! array's element, a heap entry 16 bytes). A key has at most one due time; moving or
//! removing it leaves the old heap entry behind, skipped when it comes up (and the heap
//! rebuilt before the skipped outnumber the live).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// No due time.
const NONE: u64 = u64::MAX;

#[derive(Debug, Default)]
pub struct Schedule {
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    /// Each key's due time ([`NONE`]: not scheduled).
    due: Vec<u64>,
    len: usize,
}

impl Schedule {
    /// `key` falls due at `at_ns` (instead of when it was due); `u64::MAX` is never.
    pub fn set(&mut self, key: usize, at_ns: u64) {
        if key >= self.due.len() {
            self.due.resize(key + 1, NONE);
        }
        let was = std::mem::replace(&mut self.due[key], at_ns);
        if was == at_ns {
            return;
        }
        match (was == NONE, at_ns == NONE) {
            (true, false) => self.len += 1,
            (false, true) => self.len -= 1,
            _ => {}
        }
        if at_ns != NONE {
            self.heap.push(Reverse((at_ns, key)));
            self.compact();
        }
    }

    /// `key` is due no more.
    pub fn remove(&mut self, key: usize) {
        if key < self.due.len() {
            self.set(key, NONE);
            self.compact();
        }
    }

    /// When `key` is due.
    pub fn due(&self, key: usize) -> Option<u64> {
        self.due.get(key).copied().filter(|at| *at != NONE)
    }

    /// Keys scheduled.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The earliest due time.
    pub fn earliest(&mut self) -> Option<u64> {
        self.drop_stale();
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// The earliest key due at or before `now_ns` and its time, no longer scheduled.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<(u64, usize)> {
        self.drop_stale();
        let &Reverse((at, key)) = self.heap.peek()?;
        if at > now_ns {
            return None;
        }
        self.heap.pop();
        self.due[key] = NONE;
        self.len -= 1;
        self.compact();
        Some((at, key))
    }

    /// Pops heap entries no longer the key's due time.
    fn drop_stale(&mut self) {
        while let Some(Reverse((at, key))) = self.heap.peek() {
            if self.due[*key] == *at {
                return;
            }
            self.heap.pop();
        }
    }

    fn compact(&mut self) {
        if self.heap.len() > 2 * self.len + 64 {
            let live = self.due.iter().enumerate().filter(|(_, at)| **at != NONE);
            self.heap = live.map(|(k, at)| Reverse((*at, k))).collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A model (each key's due time in a plain map) against the schedule over random
    /// sets, moves and removals: every key comes up exactly once per time it was set,
    /// never before it is due and never left behind once due.
    #[test]
    fn each_key_comes_up_once_when_due_never_early_never_late() {
        let mut next = super::super::xorshift(0x2545_f491_4f6c_dd1d_u64);
        let mut s = Schedule::default();
        let mut model: HashMap<usize, u64> = HashMap::new();
        let mut now = 0;
        for _ in 0..20_000 {
            let key = (next() % 300) as usize;
            match next() % 5 {
                0..=2 => {
                    let at = now + next() % 1000;
                    s.set(key, at);
                    model.insert(key, at);
                }
                3 => {
                    s.remove(key);
                    model.remove(&key);
                }
                _ => {
                    now += next() % 200;
                    let mut popped = Vec::new();
                    while let Some((at, k)) = s.pop_due(now) {
                        assert!(at <= now, "early: {k} due {at} at {now}");
                        assert_eq!(model.remove(&k), Some(at), "{k} twice or moved");
                        popped.push(at);
                    }
                    assert!(popped.windows(2).all(|w| w[0] <= w[1]), "in order");
                    assert!(model.values().all(|at| *at > now), "left behind when due");
                }
            }
            assert_eq!(s.len(), model.len());
            assert_eq!(s.due(key), model.get(&key).copied());
            assert_eq!(s.earliest(), model.values().min().copied());
            assert!(s.heap.len() <= 2 * s.len() + 64, "the heap stays bounded");
        }
    }
}
