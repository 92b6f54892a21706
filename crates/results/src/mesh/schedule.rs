//! Due times per key on a min-heap, so that a wake-up costs the keys due, not the keys
//! held: the mesh's prober keeps one for each peer's next probe and one for each peer's
//! next settling. A key has at most one due time; moving or removing it leaves the old
//! heap entry behind, skipped when it comes up (and the heap rebuilt before the skipped
//! outnumber the live).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::Hash;

#[derive(Debug)]
pub struct Schedule<K> {
    heap: BinaryHeap<Reverse<(u64, K)>>,
    due: HashMap<K, u64>,
}

impl<K: Copy + Ord + Hash> Default for Schedule<K> {
    fn default() -> Self {
        Schedule {
            heap: BinaryHeap::new(),
            due: HashMap::new(),
        }
    }
}

impl<K: Copy + Ord + Hash> Schedule<K> {
    /// `key` falls due at `at_ns` (instead of when it was due).
    pub fn set(&mut self, key: K, at_ns: u64) {
        if self.due.insert(key, at_ns) != Some(at_ns) {
            self.heap.push(Reverse((at_ns, key)));
            self.compact();
        }
    }

    /// `key` is due no more.
    pub fn remove(&mut self, key: &K) {
        if self.due.remove(key).is_some() {
            self.compact();
        }
    }

    /// When `key` is due.
    pub fn due(&self, key: &K) -> Option<u64> {
        self.due.get(key).copied()
    }

    /// Keys scheduled.
    pub fn len(&self) -> usize {
        self.due.len()
    }

    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }

    /// The earliest due time.
    pub fn next(&mut self) -> Option<u64> {
        self.drop_stale();
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// The earliest key due at or before `now_ns` and its time, no longer scheduled.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<(u64, K)> {
        self.drop_stale();
        let &Reverse((at, key)) = self.heap.peek()?;
        if at > now_ns {
            return None;
        }
        self.heap.pop();
        self.due.remove(&key);
        self.compact();
        Some((at, key))
    }

    /// Pops heap entries no longer the key's due time.
    fn drop_stale(&mut self) {
        while let Some(Reverse((at, key))) = self.heap.peek() {
            if self.due.get(key) == Some(at) {
                return;
            }
            self.heap.pop();
        }
    }

    fn compact(&mut self) {
        if self.heap.len() > 2 * self.due.len() + 64 {
            self.heap = self.due.iter().map(|(k, at)| Reverse((*at, *k))).collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model (each key's due time in a plain map) against the schedule over random
    /// sets, moves and removals: every key comes up exactly once per time it was set,
    /// never before it is due and never left behind once due.
    #[test]
    fn each_key_comes_up_once_when_due_never_early_never_late() {
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut s = Schedule::default();
        let mut model: HashMap<u16, u64> = HashMap::new();
        let mut now = 0;
        for _ in 0..20_000 {
            let key = (next() % 300) as u16;
            match next() % 5 {
                0..=2 => {
                    let at = now + next() % 1000;
                    s.set(key, at);
                    model.insert(key, at);
                }
                3 => {
                    s.remove(&key);
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
            assert_eq!(s.next(), model.values().min().copied());
            assert!(s.heap.len() <= 2 * s.due.len() + 64, "the heap stays bounded");
        }
    }
}
