//! A STAMP run's accounting, without I/O: the send time of every packet, and each answer
//! matched to its packet: round trips, duplicates, reordering, the reflector's numbers
//! (loss by direction) and clock, each direction's raw delays for `results::oneway`.

use hdrhistogram::Histogram;
use sonde_proto::stamp::{
    ReflectorPacket, SyncSource, TimeFormat, TimestampInfo, TimestampMethod, BASE_BYTES,
};
use sonde_results::document::stamp::{ReflectorClock, StampInterval};
use sonde_results::latency::{new_histogram, LatencySummary};
use sonde_results::marks::Fate;
use sonde_results::oneway::{Exchange, OneWayTally};

/// One answer as it arrived.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    pub packet: ReflectorPacket,
    /// Bytes of the answer.
    pub len: usize,
    /// When it arrived (`CLOCK_REALTIME`, ns).
    pub t4_ns: u64,
    pub info: Option<TimestampInfo>,
    /// The reflector's boot id (a sonde reflector's Boot ID TLV, signed when authenticated).
    pub boot_id: Option<[u8; 16]>,
    /// Each direction's (sent, arrived) TOS bytes, where known (`super::marks`).
    pub marks: super::marks::Directions,
}

/// Loss split by direction against a stateful reflector: up to the last answer (by the
/// reflector's number), `sender seq + 1` packets were sent and `reflector seq + 1`
/// arrived; after it, nothing tells which way a packet was lost.
pub fn split_loss(sent: u64, received: u64, last: Option<(u32, u32)>) -> (u64, u64, u64) {
    let Some((s, r)) = last else {
        return (0, 0, sent);
    };
    let (s, r) = (u64::from(s) + 1, u64::from(r) + 1);
    let forward = s.saturating_sub(r);
    let reverse = r.saturating_sub(received);
    (forward, reverse, sent.saturating_sub(s))
}

pub struct Ledger {
    /// Each packet's send time (ns, real time), by sequence number; 0: not sent. The
    /// kernel's stamp of its hand-over to the driver once it came, before that the clock
    /// read written into the packet.
    sent_at: Vec<u64>,
    /// The packet's send time is the kernel's stamp, by sequence number.
    kernel_sent: Vec<bool>,
    /// From the clock read written into each packet to the kernel's driver stamp.
    send_path: Histogram<u64>,
    /// Packets whose send time is the kernel's stamp.
    pub kernel_stamped: u64,
    /// Answers timed from a clock read (their packet's kernel stamp had not come).
    pub answers_clock_timed: u64,
    answered: Vec<bool>,
    /// Interval of each packet, by sequence number.
    interval_of: Vec<u32>,
    pub intervals: Vec<(StampInterval, Histogram<u64>)>,
    rtt: Histogram<u64>,
    turnaround: Histogram<u64>,
    whole: Histogram<u64>,
    pub oneway: OneWayTally,
    pub received: u64,
    pub duplicates: u64,
    pub reordered: u64,
    pub rejected: u64,
    pub twamp_light: u64,
    pub stateful_seen: bool,
    highest: Option<u32>,
    /// The answer with the reflector's highest number: (sender's seq, reflector's).
    pub last: Option<(u32, u32)>,
    pub clock: ReflectorClock,
    /// The reflector's boot id, when it told one (a sonde reflector).
    pub reflector_boot: Option<[u8; 16]>,
    /// TAI less UTC, for a reflector sending PTP timestamps.
    tai_offset_ns: u64,
    /// What the path did to the marks, each direction, over the run.
    pub marks: Fate,
}

impl Ledger {
    pub fn new(packets: usize, tai_offset_s: u64) -> Ledger {
        Ledger {
            sent_at: vec![0; packets],
            kernel_sent: vec![false; packets],
            send_path: new_histogram(),
            kernel_stamped: 0,
            answers_clock_timed: 0,
            answered: vec![false; packets],
            interval_of: vec![0; packets],
            intervals: Vec::new(),
            rtt: new_histogram(),
            turnaround: new_histogram(),
            whole: new_histogram(),
            oneway: OneWayTally::default(),
            received: 0,
            duplicates: 0,
            reordered: 0,
            rejected: 0,
            twamp_light: 0,
            stateful_seen: false,
            highest: None,
            last: None,
            clock: ReflectorClock::default(),
            reflector_boot: None,
            tai_offset_ns: tai_offset_s * 1_000_000_000,
            marks: Fate::default(),
        }
    }

    /// Packets sent so far.
    pub fn sent(&self) -> u64 {
        self.sent_at.iter().filter(|&&t| t != 0).count() as u64
    }

    pub fn on_sent(&mut self, seq: u32, t1_ns: u64, interval: u32) {
        let i = seq as usize;
        self.sent_at[i] = t1_ns.max(1);
        self.interval_of[i] = interval;
        while self.intervals.len() <= interval as usize {
            self.intervals
                .push((StampInterval::default(), new_histogram()));
        }
        self.intervals[interval as usize].0.sent += 1;
    }

    /// The kernel's stamp of packet `seq` handed to the driver: its send time from now
    /// on. Refused (false) for a packet not sent, answered, stamped already, or a stamp
    /// before the packet's clock read or a second after it (an id that lost its packet).
    pub fn on_kernel_sent(&mut self, seq: u32, ns: u64) -> bool {
        let i = seq as usize;
        let Some(&t1) = self.sent_at.get(i) else {
            return false;
        };
        if t1 == 0 || self.answered[i] || self.kernel_sent[i] || ns < t1 || ns - t1 > 1_000_000_000
        {
            return false;
        }
        let _ = self.send_path.record((ns - t1).max(1));
        self.sent_at[i] = ns;
        self.kernel_sent[i] = true;
        self.kernel_stamped += 1;
        true
    }

    /// From the clock read written into each packet to the kernel's stamp of its
    /// hand-over to the driver: the send's own time in this process and the stack.
    pub fn send_path(&self) -> Option<LatencySummary> {
        LatencySummary::of(&self.send_path)
    }

    /// The reflector's timestamp as ns since 1970 on our clock's scale (UTC).
    fn real_ns(&self, t: sonde_proto::stamp::Timestamp, format: TimeFormat) -> i128 {
        let ns = i128::from(t.to_unix_ns(format));
        match format {
            TimeFormat::Ntp => ns,
            TimeFormat::Ptp => ns - i128::from(self.tai_offset_ns),
        }
    }

    pub fn on_answer(&mut self, a: &Arrival) {
        let p = &a.packet;
        let s = p.sender_seq as usize;
        let Some(&t1) = self.sent_at.get(s).filter(|&&t| t != 0) else {
            self.rejected += 1;
            return;
        };
        if std::mem::replace(&mut self.answered[s], true) {
            self.duplicates += 1;
            return;
        }
        self.received += 1;
        self.answers_clock_timed += u64::from(!self.kernel_sent[s]);
        if self.highest.is_some_and(|h| p.sender_seq < h) {
            self.reordered += 1;
        }
        self.highest = self.highest.max(Some(p.sender_seq));
        self.stateful_seen |= p.seq != p.sender_seq;
        if self.last.is_none_or(|(_, r)| p.seq >= r) {
            self.last = Some((p.sender_seq, p.seq));
        }
        if a.len < BASE_BYTES {
            self.twamp_light += 1;
        }
        self.note_clock(a);
        let format = p.estimate.format;
        let (t1, t4) = (i128::from(t1), i128::from(a.t4_ns));
        let (t2, t3) = (
            self.real_ns(p.receive, format),
            self.real_ns(p.timestamp, format),
        );
        let most = i128::from(u32::MAX) * 1000;
        let rtt = ((t4 - t1) - (t3 - t2).max(0)).clamp(1, most) as u64;
        let _ = self.rtt.record(rtt);
        let _ = self.turnaround.record((t3 - t2).clamp(1, most) as u64);
        let _ = self.whole.record((t4 - t1).clamp(1, most) as u64);
        let (iv, h) = &mut self.intervals[self.interval_of[s] as usize];
        iv.received += 1;
        let _ = h.record(rtt);
        let (forward, reverse) = a.marks;
        if forward.is_some() || reverse.is_some() {
            for fate in [&mut self.marks, iv.marks.get_or_insert_with(Fate::default)] {
                for (way, pair) in [(&mut fate.forward, forward), (&mut fate.reverse, reverse)] {
                    if let Some((sent, arrived)) = pair {
                        way.get_or_insert_with(Default::default)
                            .record(sent, arrived);
                    }
                }
            }
        }
        self.oneway.record(Exchange {
            at_ns: t1 as i64,
            forward_raw_ns: (t2 - t1) as i64,
            reverse_raw_ns: (t4 - t3) as i64,
        });
    }

    /// The reflector's clock as its answers say: S of the last, the largest error seen.
    fn note_clock(&mut self, a: &Arrival) {
        if a.boot_id.is_some() {
            self.reflector_boot = a.boot_id;
        }
        let e = a.packet.estimate;
        let c = &mut self.clock;
        c.synchronized = e.synchronized;
        // The largest estimate (unknown error) saturates u64: no bound, not a number.
        c.error_ns = c.error_ns.max(e.bound_ns().filter(|&ns| ns < u64::MAX));
        c.format = match e.format {
            TimeFormat::Ntp => "ntp".into(),
            TimeFormat::Ptp => "ptp".into(),
        };
        if let Some(info) = a.info {
            c.sync_source = Some(source_name(info.sync_in));
            c.receive_stamp = Some(method_name(info.method_in));
            c.transmit_stamp = Some(method_name(info.method_out));
        }
    }

    /// The round trips of the whole run.
    pub fn latency(&self) -> Option<LatencySummary> {
        LatencySummary::of(&self.rtt)
    }

    /// The reflector's turnarounds (T3 - T2) and the whole round trips (T4 - T1).
    pub fn turnaround_and_whole(&self) -> (Option<LatencySummary>, Option<LatencySummary>) {
        (
            LatencySummary::of(&self.turnaround),
            LatencySummary::of(&self.whole),
        )
    }
}

fn source_name(s: SyncSource) -> String {
    match s {
        SyncSource::Ntp => "ntp".into(),
        SyncSource::Ptp => "ptp".into(),
        SyncSource::SsuBits => "ssu_bits".into(),
        SyncSource::Gnss => "gnss".into(),
        SyncSource::LocalFreeRunning => "local_free_running".into(),
        SyncSource::Other(c) => format!("code {c}"),
    }
}

fn method_name(m: TimestampMethod) -> String {
    match m {
        TimestampMethod::Hardware => "hardware".into(),
        TimestampMethod::Software => "software".into(),
        TimestampMethod::ControlPlane => "control_plane".into(),
        TimestampMethod::Other(c) => format!("code {c}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_proto::stamp::{ErrorEstimate, Timestamp};

    fn answer(s: u32, r: u32, t1: u64, one_way: u64) -> Arrival {
        let ntp = |ns| Timestamp::from_unix_ns(ns, TimeFormat::Ntp);
        Arrival {
            packet: ReflectorPacket {
                seq: r,
                sender_seq: s,
                receive: ntp(t1 + one_way),
                timestamp: ntp(t1 + one_way + 5_000),
                estimate: ErrorEstimate::from_bound_ns(1_000_000, true, TimeFormat::Ntp),
                ..Default::default()
            },
            len: 44,
            t4_ns: t1 + 2 * one_way + 5_000,
            info: None,
            boot_id: None,
            marks: (None, None),
        }
    }

    #[test]
    fn the_kernels_send_stamp_times_the_answer_and_a_stray_one_is_refused() {
        let mut l = Ledger::new(3, 37);
        let t0 = 1_795_788_000_000_000_000;
        for s in 0..3u32 {
            l.on_sent(s, t0 + u64::from(s) * 1_000_000, 0);
        }
        // Packet 0 left the driver 7 us after its clock read; the answer is 7 us shorter.
        assert!(l.on_kernel_sent(0, t0 + 7_000));
        assert!(!l.on_kernel_sent(0, t0 + 8_000), "stamped twice");
        // An id shifted onto a later packet stamps before that packet's clock read.
        assert!(
            !l.on_kernel_sent(2, t0 + 1_500_000),
            "before its clock read"
        );
        assert!(!l.on_kernel_sent(3, t0), "never sent");
        // The answer came 85 us after the clock read, 5 us of it in the reflector.
        l.on_answer(&answer(0, 0, t0, 40_000));
        // Within the histograms' three significant digits.
        let near = |got: u64, want: u64| got.abs_diff(want) * 1000 <= want;
        let rtt = l.latency().unwrap().p50;
        assert!(near(rtt, 85_000 - 5_000 - 7_000), "{rtt}");
        assert!(near(l.send_path().unwrap().p50, 7_000));
        // Packet 1 had no kernel stamp: timed from its clock read, and counted so.
        l.on_answer(&answer(1, 1, t0 + 1_000_000, 40_000));
        assert!(!l.on_kernel_sent(1, t0 + 1_010_000), "answered already");
        assert_eq!((l.kernel_stamped, l.answers_clock_timed), (1, 1));
    }

    #[test]
    fn loss_splits_by_the_reflectors_numbers() {
        // 10 sent; packets 2 and 5 lost on the way there (the reflector numbered 8 of the
        // first 10), answer r=3 lost on the way back, none after the last answer.
        assert_eq!(split_loss(10, 7, Some((9, 7))), (2, 1, 0));
        // The last two packets never answered: either way.
        assert_eq!(split_loss(10, 7, Some((7, 6))), (1, 0, 2));
        assert_eq!(split_loss(5, 0, None), (0, 0, 5));
    }

    #[test]
    fn answers_give_round_trips_duplicates_reordering_and_the_reflectors_numbers() {
        let mut l = Ledger::new(4, 37);
        let t0 = 1_795_788_000_000_000_000;
        for s in 0..4u32 {
            l.on_sent(s, t0 + u64::from(s) * 1_000_000, s / 2);
        }
        l.on_answer(&answer(1, 0, t0 + 1_000_000, 40_000));
        l.on_answer(&answer(0, 1, t0, 40_000)); // reordered
        l.on_answer(&answer(0, 1, t0, 40_000)); // duplicate
        l.on_answer(&answer(3, 2, t0 + 3_000_000, 40_000)); // forward loss of 2
        l.on_answer(&answer(7, 3, t0, 40_000)); // never sent
        assert_eq!(
            (l.received, l.duplicates, l.reordered, l.rejected),
            (3, 1, 1, 1)
        );
        assert!(l.stateful_seen);
        assert_eq!(l.last, Some((3, 2)));
        assert_eq!(split_loss(l.sent(), l.received, l.last), (1, 0, 0));
        let rtt = l.latency().unwrap();
        // 80 us out and back, the reflector's 5 us excluded (NTP's rounding: ±1 ns).
        assert!((79_900..=80_100).contains(&rtt.p50), "{}", rtt.p50);
        assert_eq!(l.intervals[0].0.received, 2);
        assert_eq!(l.intervals[1].0.received, 1);
        assert!(l.clock.synchronized && l.clock.error_ns.unwrap() >= 1_000_000);
        assert_eq!(l.oneway.exchanges(), 3);
    }
}
