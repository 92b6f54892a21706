//! The client's side of the stages: one connection's messages in flight with the readings
//! they have so far, each filed once all ten are in (or counted once they cannot be).
//!
//! A message's readings come in four events: it is sent (the application's clock), its
//! send's stamps come back on the error queue (qdisc, driver), its answer arrives (the
//! receive stamp, the application's clock and the echo's wake-up and turnaround), and a
//! later answer carries the echo's send stack for it.

use std::collections::VecDeque;

use super::io::{TxPoint, TxStamp};
use super::sample::Sampling;
use super::stages::{EchoFigures, Readings, StageHists, Unsplit, FIGURE_BYTES, UNKNOWN};

/// How many later answers a message waits for its last reading before it is counted as
/// missing one, besides twice the window: the echo's send stack comes a window of
/// answers later (each answer tells one, see `EchoStamps`).
const PATIENCE: u64 = 8;

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The message's index on its connection (TCP: its place; UDP: its sequence).
    index: u64,
    r: Readings,
    answered: bool,
    /// Answered inside the measured window: filed; outside it, only forgotten.
    counted: bool,
}

/// One connection's messages waiting for readings, oldest first.
#[derive(Debug)]
pub struct Book {
    entries: VecDeque<Entry>,
    /// TCP: the request size, whose multiples are the sends' ids; UDP: 0 (one id a datagram).
    request_bytes: u64,
    /// The newest message answered.
    newest_answered: Option<u64>,
    /// Answers a message waits for its last reading.
    patience: u64,
    /// Unanswered messages this far behind the newest answered one are forgotten (lost,
    /// or late beyond any window).
    horizon: u64,
    /// Which messages are stamped, and a UDP send's key.
    sampling: Sampling,
    /// An entry was answered or told its send stack since the last filing.
    changed: bool,
}

impl Book {
    /// `request_bytes` for a TCP connection, `None` for UDP; `window`: messages in flight;
    /// only the messages `sampling` picks are booked.
    pub fn new(tcp_request_bytes: Option<usize>, window: usize, sampling: Sampling) -> Book {
        Book {
            entries: VecDeque::with_capacity(window.max(1) * 2 + PATIENCE as usize),
            request_bytes: tcp_request_bytes.unwrap_or(0) as u64,
            newest_answered: None,
            patience: 2 * window as u64 + PATIENCE,
            horizon: 4 * window as u64 + PATIENCE,
            sampling,
            changed: false,
        }
    }

    /// The id the kernel gives the stamps of message `index`'s send (low 32 bits).
    #[cfg(test)]
    fn key(&self, index: u64) -> u32 {
        key_of(self.request_bytes, self.sampling, index)
    }

    /// Message `index` is sent; `app_send` is the real clock just before its first byte.
    /// Only a sampled message is booked: call [`Book::sampled`] first.
    pub fn sent(&mut self, index: u64, app_send: u64) {
        debug_assert!(self.sampling.sampled(index));
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
            counted: false,
        });
    }

    /// Whether message `index` is stamped.
    #[inline]
    pub fn sampled(&self, index: u64) -> bool {
        self.sampling.sampled(index)
    }

    /// Whether a booked message waits for its answer: a datagram's receive is worth
    /// stamping.
    pub fn awaits_answer(&self) -> bool {
        self.entries.iter().any(|e| !e.answered)
    }

    /// Whether a sent message still waits for its driver stamp: the error queue is worth
    /// reading.
    pub fn wants_stamps(&self) -> bool {
        self.entries.iter().any(|e| e.r.driver == 0)
    }

    /// How many stamps the sent messages still wait for (qdisc and driver each), at most:
    /// what one read of the error queue asks for.
    pub fn stamps_awaited(&self) -> usize {
        let waiting = self.entries.iter().filter(|e| e.r.driver == 0);
        waiting.map(|e| 1 + usize::from(e.r.sched == 0)).sum()
    }

    /// A stamp of a send came back from the error queue. On TCP it holds for every
    /// message up to its id still without one: sends made while an earlier one waits are
    /// coalesced into one packet, whose stamp carries only the last send's id. A UDP
    /// datagram has its own.
    pub fn stamped(&mut self, s: TxStamp) {
        let r = self.request_bytes;
        let sampling = self.sampling;
        for e in &mut self.entries {
            let key = key_of(r, sampling, e.index);
            if !reached(key, s.key) {
                break;
            }
            if r == 0 && key != s.key {
                continue;
            }
            let at = match s.point {
                TxPoint::Sched => &mut e.r.sched,
                TxPoint::Driver => &mut e.r.driver,
            };
            if *at == 0 {
                *at = s.ns;
                self.changed = true;
            }
        }
    }

    /// Message `index`'s answer arrived: its receive stamp, the real clock after the read,
    /// the echo's figures when the answer carried them, and whether it counts (inside the
    /// measured window).
    pub fn answered(
        &mut self,
        index: u64,
        (rx, app_recv): (Option<u64>, u64),
        f: Option<EchoFigures>,
        counted: bool,
    ) {
        self.newest_answered = Some(self.newest_answered.map_or(index, |n| n.max(index)));
        // Most answers tell no send stack and answer no booked message: nothing to look up.
        if let Some(f) = f.filter(|f| f.sent_tag != UNKNOWN) {
            if let Some(e) = self.find(f.sent_tag) {
                e.r.send = f.send_ns;
                self.changed = true;
            }
        }
        if !self.sampling.sampled(index) {
            return;
        }
        let Some(e) = self.entries.iter_mut().find(|e| e.index == index) else {
            return;
        };
        self.changed = true;
        e.answered = true;
        e.counted = counted;
        e.r.rx = rx.unwrap_or(0);
        e.r.app_recv = app_recv;
        if let Some(f) = f.filter(|f| f.tag == index as u32) {
            (e.r.wake, e.r.turnaround, e.r.echo_rx) = (f.wake_ns, f.turnaround_ns, f.rx_at);
        }
    }

    /// An entry by the low 32 bits of its index.
    fn find(&mut self, tag: u32) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| e.index as u32 == tag)
    }

    /// Files every answered message whose readings are complete, and counts those that
    /// waited [`PATIENCE`] answers for one that never came (`all`: at the end, every one).
    pub fn file(&mut self, into: &mut StageHists, all: bool) {
        // Nothing answered or told since the last filing, and nothing overdue yet: the
        // same entries would be kept (an unsampled answer changes none).
        let oldest = self.entries.front().map(|e| e.index);
        let overdue = oldest
            .zip(self.newest_answered)
            .is_some_and(|(o, n)| n >= o + self.patience);
        if !(all || self.changed || overdue) {
            return;
        }
        self.changed = false;
        let (newest, patience, horizon) = (self.newest_answered, self.patience, self.horizon);
        self.entries.retain(|e| {
            let behind = |n: u64| newest.is_some_and(|m| m >= e.index + n);
            if !e.answered {
                return !all && !behind(horizon);
            }
            match e.r.stages() {
                Err(Unsplit::Missing) if !(all || behind(patience)) => true,
                _ if !e.counted => false,
                _ => {
                    into.file(&e.r);
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

/// The echo's figures at the start of each answer on a TCP stream, whatever the reads'
/// boundaries: an answer's figures are whole before the answer is.
#[derive(Debug)]
pub struct Heads {
    answer_bytes: usize,
    /// Bytes of the current answer read so far.
    at: usize,
    head: [u8; FIGURE_BYTES],
    ready: VecDeque<EchoFigures>,
}

impl Heads {
    pub fn new(answer_bytes: usize) -> Heads {
        Heads {
            answer_bytes,
            at: 0,
            head: [0; FIGURE_BYTES],
            ready: VecDeque::new(),
        }
    }

    /// Reads the next bytes of the stream.
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let n = if self.at < FIGURE_BYTES {
                let n = (FIGURE_BYTES - self.at).min(data.len());
                self.head[self.at..self.at + n].copy_from_slice(&data[..n]);
                if self.at + n == FIGURE_BYTES {
                    self.ready.extend(EchoFigures::read(&self.head));
                }
                n
            } else {
                (self.answer_bytes - self.at).min(data.len())
            };
            self.at += n;
            data = &data[n..];
            if self.at == self.answer_bytes {
                self.at = 0;
            }
        }
    }

    /// Whether the stream is at an answer's start with no figures waiting: a read of
    /// whole answers may then be read in place, not fed.
    #[inline]
    pub fn aligned(&self) -> bool {
        self.at == 0 && self.ready.is_empty()
    }

    pub fn answer_bytes(&self) -> usize {
        self.answer_bytes
    }

    /// The figures of the oldest answer not yet taken.
    pub fn take(&mut self) -> Option<EchoFigures> {
        self.ready.pop_front()
    }
}

/// Whether a stamp of id `stamp` covers the send of id `key` (ids wrap at 32 bits).
pub fn reached(key: u32, stamp: u32) -> bool {
    (stamp.wrapping_sub(key) as i32) >= 0
}

/// The id of a booked message's stamps: TCP's by bytes ([`send_key`]), a sampled UDP
/// datagram's by [`Sampling::udp_key`].
fn key_of(tcp_bytes: u64, sampling: Sampling, index: u64) -> u32 {
    match tcp_bytes {
        0 => sampling.udp_key(index),
        b => send_key(b, index),
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
            rx_at: 0,
        }
    }

    /// Answers of 48 bytes read in pieces of 7 and of 100: each answer's figures whole.
    #[test]
    fn heads_find_each_answers_figures_across_reads() {
        let mut stream = Vec::new();
        for tag in 0..5 {
            let mut a = [0xeeu8; 48];
            figures(tag, tag.wrapping_sub(1), tag * 10).write(&mut a);
            stream.extend_from_slice(&a);
        }
        for piece in [7, 100] {
            let mut h = Heads::new(48);
            stream.chunks(piece).for_each(|c| h.feed(c));
            let tags: Vec<u32> = std::iter::from_fn(|| h.take()).map(|f| f.tag).collect();
            assert_eq!(tags, [0, 1, 2, 3, 4], "pieces of {piece}");
        }
    }

    fn stamp(key: u32, point: TxPoint, ns: u64) -> TxStamp {
        TxStamp { key, point, ns }
    }

    /// Two TCP messages of 64 bytes: the send ids are 63 and 127; each message is filed
    /// once the next answer brought the echo's send stack, and they sum to the round trip.
    #[test]
    fn tcp_messages_are_filed_once_the_next_answer_completes_them() {
        let mut b = Book::new(Some(64), 1, Sampling::all());
        let mut h = StageHists::new();
        for i in 0..2u64 {
            let t = 10_000 * (i + 1);
            b.sent(i, t);
            b.stamped(stamp(b.key(i), TxPoint::Sched, t + 10));
            b.stamped(stamp(b.key(i), TxPoint::Driver, t + 30));
            let prev = if i == 0 { UNKNOWN } else { i as u32 - 1 };
            let f = figures(i as u32, prev, 50);
            b.answered(i, (Some(t + 2_000), t + 2_500), Some(f), true);
            b.file(&mut h, false);
        }
        assert_eq!(b.key(1), 127);
        assert_eq!(b.stamps_awaited(), 0, "both sends' stamps are in");
        b.sent(2, 40_000);
        assert_eq!(b.stamps_awaited(), 2, "the qdisc's and the driver's");
        b.stamped(stamp(b.key(2), TxPoint::Sched, 40_010));
        assert_eq!(b.stamps_awaited(), 1);
        b.stamped(stamp(b.key(2), TxPoint::Driver, 40_030));
        assert_eq!(b.stamps_awaited(), 0);
        b.answered(2, (Some(42_000), 42_500), Some(figures(2, 1, 50)), true);
        b.file(&mut h, false);
        assert_eq!(
            h.stages[0].len(),
            2,
            "the first two, completed by the answers after them"
        );
        assert_eq!(b.len(), 1, "the third waits for its send stack");
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
        // Past the horizon of a window of 1 (4 + PATIENCE).
        const LATER: u64 = 20;
        let mut b = Book::new(None, 1, Sampling::all());
        let mut h = StageHists::new();
        for i in 0..3u64 {
            b.sent(i, 1_000 + i);
        }
        b.stamped(stamp(0, TxPoint::Sched, 1_010));
        b.stamped(stamp(0, TxPoint::Driver, 1_020));
        b.answered(0, (Some(5_000), 5_100), Some(figures(0, 0, 40)), true);
        b.answered(2, (Some(5_000), 5_100), Some(figures(9, 0, 40)), true);
        b.file(&mut h, false);
        assert_eq!(h.stages[0].len(), 1);
        assert_eq!(b.len(), 2, "1 is unanswered, 2 misses its figures");
        for i in 3..LATER {
            b.sent(i, 9_000);
            b.answered(i, (None, 9_100), None, i % 2 == 0);
        }
        b.file(&mut h, false);
        assert!(h.missing >= 1, "message 2 waited too long");
        assert!(
            b.entries.iter().all(|e| e.index != 1),
            "1 is forgotten: lost"
        );
        b.file(&mut h, true);
        let counted = 2 + (3..LATER).filter(|i| i % 2 == 0).count() as u64;
        assert_eq!(h.stages[0].len() + h.missing, counted);
        assert!(b.is_empty());
    }
}
