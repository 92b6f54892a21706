//! The client's side of the stages: one connection's messages in flight with the readings
//! they have so far, each filed once all ten are in (or counted once they cannot be).
//!
//! A message's readings come in four events: it is sent (the application's clock), its
//! send's stamps come back on the error queue (qdisc, driver), its answer arrives (the
//! receive stamp, the application's clock and the echo's wake-up and turnaround), and a
//! later answer carries the echo's send stack for it.

use std::collections::VecDeque;

use super::io::{TxPoint, TxStamp};
use super::stages::{EchoFigures, Readings, StageHists, Unsplit, UNKNOWN};

/// How many later answers a message waits for its last reading before it is counted as
/// missing one: the echo's send stack comes in the next answer, or the one after.
const PATIENCE: u64 = 8;

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The message's index on its connection (TCP: its place; UDP: its sequence).
    index: u64,
    r: Readings,
    answered: bool,
}

/// One connection's messages waiting for readings, oldest first.
#[derive(Debug)]
pub struct Book {
    entries: VecDeque<Entry>,
    /// TCP: the request size, whose multiples are the sends' ids; UDP: 0 (one id a datagram).
    request_bytes: u64,
    /// The newest message answered.
    newest_answered: Option<u64>,
}

impl Book {
    /// `request_bytes` for a TCP connection, `None` for UDP.
    pub fn new(tcp_request_bytes: Option<usize>) -> Book {
        Book {
            entries: VecDeque::with_capacity(64),
            request_bytes: tcp_request_bytes.unwrap_or(0) as u64,
            newest_answered: None,
        }
    }

    /// The id the kernel gives the stamps of message `index`'s send (low 32 bits).
    #[cfg(test)]
    fn key(&self, index: u64) -> u32 {
        send_key(self.request_bytes, index)
    }

    /// Message `index` is sent; `app_send` is the real clock just before its first byte.
    pub fn sent(&mut self, index: u64, app_send: u64) {
        self.entries.push_back(Entry {
            index,
            r: Readings {
                app_send,
                wake: UNKNOWN,
                turnaround: UNKNOWN,
                send: UNKNOWN,
                ..Readings::default()
            },
            answered: false,
        });
    }

    /// A stamp of a send came back from the error queue.
    pub fn stamped(&mut self, s: TxStamp) {
        let r = self.request_bytes;
        let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| send_key(r, e.index) == s.key)
        else {
            return;
        };
        match s.point {
            TxPoint::Sched => e.r.sched = s.ns,
            TxPoint::Driver => e.r.driver = s.ns,
        }
    }

    /// Message `index`'s answer arrived: its receive stamp, the real clock after the read,
    /// and the echo's figures when the answer carried them.
    pub fn answered(&mut self, index: u64, rx: Option<u64>, app_recv: u64, f: Option<EchoFigures>) {
        self.newest_answered = Some(self.newest_answered.map_or(index, |n| n.max(index)));
        if let Some(f) = f {
            if let Some(e) = self.find(f.sent_tag) {
                e.r.send = f.send_ns;
            }
        }
        let Some(e) = self.entries.iter_mut().find(|e| e.index == index) else {
            return;
        };
        e.answered = true;
        e.r.rx = rx.unwrap_or(0);
        e.r.app_recv = app_recv;
        if let Some(f) = f.filter(|f| f.tag == index as u32) {
            (e.r.wake, e.r.turnaround) = (f.wake_ns, f.turnaround_ns);
        }
    }

    /// An entry by the low 32 bits of its index.
    fn find(&mut self, tag: u32) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| e.index as u32 == tag)
    }

    /// Message `index` will never be answered (a lost UDP request): forgotten.
    pub fn lost(&mut self, index: u64) {
        self.entries.retain(|e| e.index != index);
    }

    /// Files every answered message whose readings are complete, and counts those that
    /// waited [`PATIENCE`] answers for one that never came (`all`: at the end, every one).
    pub fn file(&mut self, into: &mut StageHists, all: bool) {
        let newest = self.newest_answered;
        self.entries.retain(|e| {
            if !e.answered {
                return !all;
            }
            let split = e.r.stages();
            let waited = newest.is_some_and(|n| n >= e.index + PATIENCE);
            match split {
                Err(Unsplit::Missing) if !(all || waited) => true,
                split => {
                    into.record(split);
                    false
                }
            }
        });
    }

    /// Messages waiting for readings.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The id the kernel gives the stamps of message `index`'s send (its low 32 bits): TCP
/// counts bytes (the id of a send is its last byte's), UDP datagrams (`bytes` 0).
pub fn send_key(bytes: u64, index: u64) -> u32 {
    match bytes {
        0 => index as u32,
        b => ((index + 1) * b - 1) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(tag: u32, sent_tag: u32, send_ns: u32) -> EchoFigures {
        EchoFigures {
            tag,
            wake_ns: 100,
            turnaround_ns: 200,
            sent_tag,
            send_ns,
        }
    }

    fn stamp(key: u32, point: TxPoint, ns: u64) -> TxStamp {
        TxStamp { key, point, ns }
    }

    /// Two TCP messages of 64 bytes: the send ids are 63 and 127; each message is filed
    /// once the next answer brought the echo's send stack, and they sum to the round trip.
    #[test]
    fn tcp_messages_are_filed_once_the_next_answer_completes_them() {
        let mut b = Book::new(Some(64));
        let mut h = StageHists::new();
        for i in 0..2u64 {
            let t = 10_000 * (i + 1);
            b.sent(i, t);
            b.stamped(stamp(b.key(i), TxPoint::Sched, t + 10));
            b.stamped(stamp(b.key(i), TxPoint::Driver, t + 30));
            let prev = if i == 0 { UNKNOWN } else { i as u32 - 1 };
            b.answered(
                i,
                Some(t + 2_000),
                t + 2_500,
                Some(figures(i as u32, prev, 50)),
            );
            b.file(&mut h, false);
        }
        assert_eq!(b.key(1), 127);
        assert_eq!(
            h.stages[0].len(),
            1,
            "the first, completed by the second answer"
        );
        assert_eq!(b.len(), 1, "the second waits for its send stack");
        let s0 = [10, 20, 2_000 - 30 - 350, 100, 200, 50, 500];
        assert_eq!(s0.iter().sum::<u64>(), 2_500);
        for (hist, v) in h.stages.iter().zip(s0) {
            assert_eq!(hist.max(), hist.highest_equivalent(v));
        }
        b.file(&mut h, true);
        assert_eq!(
            (h.missing, b.len()),
            (1, 0),
            "at the end, counted as missing"
        );
    }

    /// A UDP answer whose figures name another message, a message without its stamps and
    /// a lost one: none is guessed, none is filed twice.
    #[test]
    fn udp_answers_pair_by_sequence_and_lost_messages_are_forgotten() {
        let mut b = Book::new(None);
        let mut h = StageHists::new();
        for i in 0..3u64 {
            b.sent(i, 1_000 + i);
        }
        b.lost(1);
        b.stamped(stamp(0, TxPoint::Sched, 1_010));
        b.stamped(stamp(0, TxPoint::Driver, 1_020));
        b.answered(0, Some(5_000), 5_100, Some(figures(0, 0, 40)));
        b.answered(2, Some(5_000), 5_100, Some(figures(9, 0, 40)));
        b.file(&mut h, false);
        assert_eq!(h.stages[0].len(), 1);
        assert_eq!(b.len(), 1);
        for i in 3..3 + PATIENCE {
            b.sent(i, 9_000);
            b.answered(i, None, 9_100, None);
        }
        b.file(&mut h, false);
        assert!(h.missing >= 1, "message 2 waited too long");
        b.file(&mut h, true);
        assert_eq!(h.stages[0].len() + h.missing, 2 + PATIENCE);
        assert!(b.is_empty());
    }
}
