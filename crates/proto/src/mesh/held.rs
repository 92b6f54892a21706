//! A peer's last first answer, held until the reflector says when it really left. The
//! reflector writes its transmit time (T3) into the answer before sending it: a wait in its
//! host's queue or a late send after that read would count as network time, in the round
//! trip ((T4 - T1) - (T3 - T2)) and in the backward one-way delay. Its next answer of the
//! session carries the first one's real departure, its kernel's transmit stamp, in RFC
//! 8972's Follow-Up Telemetry TLV (`stamp::follow_up`). So each answer's figures are booked
//! one answer later: corrected when the next answer's follow-up names it and is sane,
//! by the clock read otherwise, or by the clock read once its deadline passed (no next
//! answer came in time). Each booking is counted by where its T3 came from.

use sonde_results::mesh::{PeerStats, Stamps};

use crate::stamp::{FollowUp, TimeFormat};

/// First answers booked, by where the reflector's departure (T3) came from: its kernel's
/// transmit stamp, told in the next answer's follow-up (`stamp`), or the clock read it
/// wrote into the answer before sending it (`clock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reflections {
    pub stamp: u64,
    pub clock: u64,
}

/// A first answer whose figures wait for the next answer's follow-up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    /// The reflector's own number for it: a follow-up names it.
    pub refl_seq: u32,
    /// Its round trip with the reflector's hold in (T4 - T1, the ledger's clock).
    pub gross_ns: u64,
    /// Its four timestamps, T3 the reflector's clock read.
    pub stamps: Stamps,
    /// From then on (the ledger's clock) it is booked by the clock read.
    pub due_ns: u64,
}

impl Held {
    /// Books its round trip and timestamps into `stats`, T3 from `follow_up` when that
    /// names this answer and is sane: not before the clock read the reflector wrote (the
    /// stamp is taken after it) and leaving a hold shorter than the round trip. Whether
    /// it was corrected so; counted in `counts`.
    pub fn book(
        self,
        stats: &mut PeerStats,
        follow_up: Option<FollowUp>,
        counts: &mut Reflections,
    ) {
        let s = self.stamps;
        let t3 = follow_up
            .filter(|f| f.seq == self.refl_seq)
            .map(|f| f.timestamp.to_unix_ns(TimeFormat::Ntp) as i64)
            .filter(|&t3| {
                t3 >= s.reflected_out_ns && t3 - s.reflected_in_ns < self.gross_ns as i64
            });
        let stamps = Stamps {
            reflected_out_ns: t3.unwrap_or(s.reflected_out_ns),
            ..s
        };
        let held = (stamps.reflected_out_ns - stamps.reflected_in_ns).max(0) as u64;
        // A hold as long as the whole round trip is the reflector's error: not taken out.
        stats.book_rtt(match held < self.gross_ns {
            true => self.gross_ns - held,
            false => self.gross_ns,
        });
        stats.on_stamps(stamps);
        match t3 {
            Some(_) => counts.stamp += 1,
            None => counts.clock += 1,
        }
    }
}
