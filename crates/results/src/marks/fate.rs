//! What the path did to the marks, per direction: every packet counted as (sent as X,
//! arrived as Y), and from those pairs the DSCP kept, bleached (to 0) or re-marked, the ECN
//! cleared, and the CE marks (packets sent ECT that arrived CE). Sans-IO: the socket
//! loops hand in TOS bytes; the sentences a report and a verdict print come from here.

use serde::{Deserialize, Serialize};

use super::{Dscp, Ecn};

/// Packets that were sent with one TOS byte and arrived with another (or the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub sent_dscp: Dscp,
    pub sent_ecn: Ecn,
    pub arrived_dscp: Dscp,
    pub arrived_ecn: Ecn,
    pub packets: u64,
}

/// One direction's packets whose arrival marks were read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectionFate {
    pub packets: u64,
    /// Arrived with the DSCP they were sent with.
    pub dscp_kept: u64,
    /// Sent with a DSCP other than 0, arrived with 0.
    pub dscp_bleached: u64,
    /// Arrived with another DSCP, not 0.
    pub dscp_remarked: u64,
    /// Sent ECT(0) or ECT(1), arrived CE: the path said "congestion experienced".
    pub ce: u64,
    /// Sent ECT(0) or ECT(1): the packets a CE fraction is of.
    pub ect_sent: u64,
    /// Sent ECT, arrived not-ECT (or the other ECT): the path cleared or changed ECN.
    pub ecn_changed: u64,
    /// Each (sent, arrived) pair seen, in the order first seen.
    pub transitions: Vec<Transition>,
}

impl DirectionFate {
    /// One packet sent as `sent` and arrived as `arrived` (TOS / Traffic Class bytes).
    pub fn record(&mut self, sent: u8, arrived: u8) {
        self.record_n(sent, arrived, 1)
    }

    /// `n` packets sent as `sent`, arrived as `arrived` (a receiver's per-TOS counts).
    pub fn record_n(&mut self, sent: u8, arrived: u8, n: u64) {
        if n == 0 {
            return;
        }
        let (sd, se) = (Dscp::of_tos(sent), Ecn::of_tos(sent));
        let (ad, ae) = (Dscp::of_tos(arrived), Ecn::of_tos(arrived));
        self.packets += n;
        if sd == ad {
            self.dscp_kept += n;
        } else if ad == Dscp::DEFAULT {
            self.dscp_bleached += n;
        } else {
            self.dscp_remarked += n;
        }
        if se.capable() {
            self.ect_sent += n;
            match ae {
                Ecn::Ce => self.ce += n,
                a if a != se => self.ecn_changed += n,
                _ => {}
            }
        }
        let same = |t: &&mut Transition| {
            (t.sent_dscp, t.sent_ecn, t.arrived_dscp, t.arrived_ecn) == (sd, se, ad, ae)
        };
        match self.transitions.iter_mut().find(same) {
            Some(t) => t.packets += n,
            None => self.transitions.push(Transition {
                sent_dscp: sd,
                sent_ecn: se,
                arrived_dscp: ad,
                arrived_ecn: ae,
                packets: n,
            }),
        }
    }

    pub fn merge(&mut self, other: &DirectionFate) {
        for t in &other.transitions {
            self.record_n(
                super::tos(t.sent_dscp, t.sent_ecn),
                super::tos(t.arrived_dscp, t.arrived_ecn),
                t.packets,
            );
        }
    }

    /// One line of counts: `40 packets: DSCP kept 26, bleached 14, re-marked 0; CE 0 of
    /// 40 sent ECT`.
    pub fn counts_line(&self) -> String {
        let mut s = format!(
            "{} packets: DSCP kept {}, bleached {}, re-marked {}",
            self.packets, self.dscp_kept, self.dscp_bleached, self.dscp_remarked
        );
        if self.ect_sent > 0 {
            s.push_str(&format!("; CE {} of {} sent ECT", self.ce, self.ect_sent));
        }
        s
    }

    /// CE marks as a fraction of the packets sent ECT; `None` when none was.
    pub fn ce_fraction(&self) -> Option<f64> {
        (self.ect_sent > 0).then(|| self.ce as f64 / self.ect_sent as f64)
    }

    /// What happened to the DSCP most sent: `bleaches DSCP 46 (EF) to 0`, `re-marks DSCP 46
    /// (EF) to 34 (AF41)`, with `on N % of packets` when not all; `None` when kept.
    fn dscp_change(&self) -> Option<String> {
        let changed = self.dscp_bleached + self.dscp_remarked;
        if changed == 0 {
            return None;
        }
        let t = self
            .transitions
            .iter()
            .filter(|t| t.sent_dscp != t.arrived_dscp)
            .max_by_key(|t| t.packets)?;
        let verb = if t.arrived_dscp == Dscp::DEFAULT {
            "bleaches"
        } else {
            "re-marks"
        };
        let share = if changed == self.packets {
            String::new()
        } else {
            format!(" on {} of packets", percent(changed, self.packets))
        };
        Some(format!(
            "{verb} DSCP {} to {}{share}",
            t.sent_dscp.words(),
            t.arrived_dscp.words()
        ))
    }
}

fn percent(part: u64, whole: u64) -> String {
    let p = 100.0 * part as f64 / whole.max(1) as f64;
    if p >= 10.0 || p == 0.0 {
        format!("{p:.0} %")
    } else {
        format!("{p:.1} %")
    }
}

/// Both directions: forward is what the far end received of ours, reverse what we
/// received of its. A direction whose arrivals could not be read is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward: Option<DirectionFate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse: Option<DirectionFate>,
}

impl Fate {
    pub fn is_empty(&self) -> bool {
        self.forward.as_ref().is_none_or(|f| f.packets == 0)
            && self.reverse.as_ref().is_none_or(|r| r.packets == 0)
    }

    pub fn merge(&mut self, other: &Fate) {
        for (mine, theirs) in [
            (&mut self.forward, &other.forward),
            (&mut self.reverse, &other.reverse),
        ] {
            if let Some(t) = theirs {
                mine.get_or_insert_with(Default::default).merge(t);
            }
        }
    }

    /// What the marks show, a sentence each: `the path bleaches DSCP 46 (EF) to 0 forward
    /// only`, `CE on 12 % of packets forward (an AQM marks here)`.
    pub fn words(&self) -> Vec<String> {
        let mut out = Vec::new();
        let change = |d: &Option<DirectionFate>| d.as_ref().map(DirectionFate::dscp_change);
        match (change(&self.forward), change(&self.reverse)) {
            (Some(Some(f)), Some(Some(r))) if f == r => out.push(format!("the path {f} both ways")),
            (f, r) => {
                for (this, other, way) in [(&f, &r, "forward"), (&r, &f, "reverse")] {
                    if let Some(Some(c)) = this {
                        let only = if matches!(other, Some(None)) {
                            " only"
                        } else {
                            ""
                        };
                        out.push(format!("the path {c} {way}{only}"));
                    }
                }
            }
        }
        for (d, way) in [(&self.forward, "forward"), (&self.reverse, "reverse")] {
            let Some(d) = d else { continue };
            let of_ect = |n: u64| {
                let share = percent(n, d.ect_sent);
                format!("{share} of packets {way} ({n} of {} sent ECT)", d.ect_sent)
            };
            if d.ce > 0 {
                let ce = of_ect(d.ce);
                out.push(format!(
                    "CE on {ce}: an AQM or a congested queue marks here"
                ));
            }
            if d.ecn_changed > 0 {
                let changed = of_ect(d.ecn_changed);
                out.push(format!("the path clears or changes ECN on {changed}"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::tos;
    use super::*;

    const EF0: u8 = 46 << 2 | 2; // EF, ECT(0)

    #[test]
    fn counts_each_pair_and_what_it_means() {
        let mut d = DirectionFate::default();
        for i in 0..100u32 {
            let arrived = match i % 10 {
                0 => 3,                        // bleached, CE
                1 => tos(Dscp(34), Ecn::Ect0), // re-marked AF41
                2 => 0,                        // bleached, ECN cleared
                _ => EF0,                      // kept
            };
            d.record(EF0, arrived);
        }
        assert_eq!(d.packets, 100);
        assert_eq!(d.dscp_kept, 70);
        assert_eq!(d.dscp_bleached, 20);
        assert_eq!(d.dscp_remarked, 10);
        assert_eq!((d.ce, d.ect_sent, d.ecn_changed), (10, 100, 10));
        assert_eq!(d.ce_fraction(), Some(0.1));
        assert_eq!(d.transitions.len(), 4);
        let mut twice = d.clone();
        twice.merge(&d);
        assert_eq!(
            (twice.packets, twice.ce, twice.transitions.len()),
            (200, 20, 4)
        );
    }

    #[test]
    fn words_say_which_way_the_path_bleaches_and_marks() {
        let mut f = Fate::default();
        let (mut fwd, mut rev) = (DirectionFate::default(), DirectionFate::default());
        for i in 0..50 {
            fwd.record(EF0, if i % 4 == 0 { 3 } else { 2 });
            rev.record(EF0, EF0);
        }
        f.forward = Some(fwd);
        f.reverse = Some(rev);
        assert_eq!(
            f.words(),
            [
                "the path bleaches DSCP 46 (EF) to 0 forward only",
                "CE on 26 % of packets forward (13 of 50 sent ECT): an AQM or a congested queue marks here"
            ]
        );
        let mut both = f.clone();
        both.reverse = both.forward.clone();
        assert_eq!(
            both.words()[0],
            "the path bleaches DSCP 46 (EF) to 0 both ways"
        );
        let mut partial = DirectionFate::default();
        partial.record(EF0, tos(Dscp(10), Ecn::Ect0));
        partial.record(EF0, EF0);
        let only_fwd = Fate {
            forward: Some(partial),
            reverse: None,
        };
        assert_eq!(
            only_fwd.words(),
            ["the path re-marks DSCP 46 (EF) to 10 (AF11) on 50 % of packets forward"]
        );
        assert!(Fate::default().words().is_empty() && Fate::default().is_empty());
        assert_eq!(
            f.reverse.unwrap().counts_line(),
            "50 packets: DSCP kept 50, bleached 0, re-marked 0; CE 0 of 50 sent ECT"
        );
    }
}
