//! A run's one-way figures (`end.oneway`, `intervals[].oneway`): the client's raw delays
//! with the clocks' offset taken off, the bound that holds on them and where it comes
//! from. Three sources, the tightest believed: one clock (both ends on one host), both
//! clocks' own bounds (`sonde clock`), and the exchange itself ([`super::fit`]), which
//! rests on nothing but causality and so overrules a clock claim it contradicts.

use serde::{Deserialize, Serialize};

use super::fit::Offset;
use super::tally::{OneWayRaw, OneWayTally};
use crate::clock::ClockState;
use crate::latency::LatencySummary;

/// Where the bound on the clocks' offset comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoundFrom {
    /// Both ends read one host's clock (the same boot id): no offset at all.
    OneClock,
    /// Both clocks are synchronised: the sum of their own bounds.
    Clocks,
    /// The exchange's own fit.
    Exchange,
}

impl BoundFrom {
    pub fn words(self) -> &'static str {
        match self {
            BoundFrom::OneClock => "one clock",
            BoundFrom::Clocks => "bound from the clocks",
            BoundFrom::Exchange => "bound from the exchange",
        }
    }
}

/// Each direction's delay, as `end.oneway` and each interval's `oneway`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OneWay {
    /// Messages with both ends' stamps.
    pub exchanges: u64,
    /// Exchanges beyond a worker's budget for one interval (2^20), counted and not in the
    /// figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchanges_not_kept: Option<u64>,
    /// Client to server, the offset taken off; absent with a clock fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_ns: Option<LatencySummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse_ns: Option<LatencySummary>,
    /// Every delay above is true within ± this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_from: Option<BoundFrom>,
    /// The offset taken off: the server's clock less the client's, at the middle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset_ns: Option<f64>,
    /// The exchange's own fit of the offset (the whole run's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<Offset>,
    /// The clocks' own claim, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clocks: Option<String>,
    /// The clocks' own bound on the offset (0: one clock); absent when either is not
    /// synchronised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clocks_bound_ns: Option<f64>,
    /// The exchange contradicts the clocks' claim: they disagree beyond their bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clocks_disagree: Option<String>,
    /// No delay is given: no offset fits the exchanges, or a direction fell below zero by
    /// more than its bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_fault: Option<String>,
    /// How the offset was chosen when not as above (a load's loaded phase: its idle's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What the two clocks claim about their offset: 0 within `bound_ns`.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub bound_ns: Option<f64>,
    pub from: BoundFrom,
    pub words: String,
}

/// One end's clock as its side reported it: its host's boot id and its clock state.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClockEnd<'a> {
    pub boot_id: Option<&'a str>,
    pub clock: Option<&'a ClockState>,
}

/// The clocks' claim from both ends' reports.
pub fn claim(client: ClockEnd<'_>, server: ClockEnd<'_>) -> Claim {
    if client.boot_id.is_some() && client.boot_id == server.boot_id {
        return Claim {
            bound_ns: Some(0.0),
            from: BoundFrom::OneClock,
            words: "one clock: both ends on one host".into(),
        };
    }
    let (Some(c), Some(s)) = (client.clock, server.clock) else {
        return Claim {
            bound_ns: None,
            from: BoundFrom::Clocks,
            words: "an end did not report its clock".into(),
        };
    };
    match (c.bound.error_ns, s.bound.error_ns) {
        (Some(a), Some(b)) => Claim {
            bound_ns: Some((a + b) as f64),
            from: BoundFrom::Clocks,
            words: format!(
                "clocks synchronised: ± {} (client, {}) + {} (server, {})",
                super::us(a as f64),
                c.bound.from,
                super::us(b as f64),
                s.bound.from
            ),
        },
        _ => {
            let who: Vec<&str> = [("client", c), ("server", s)]
                .into_iter()
                .filter(|(_, x)| x.bound.error_ns.is_none())
                .map(|(w, _)| w)
                .collect();
            Claim {
                bound_ns: None,
                from: BoundFrom::Clocks,
                words: format!("clocks not synchronised ({})", who.join(" and ")),
            }
        }
    }
}

/// The offset chosen for a run, and its bound.
struct Chosen {
    fit: Option<Offset>,
    /// The fit is used (else the clocks' claim of 0).
    use_fit: bool,
    bound: f64,
    from: BoundFrom,
    disagree: Option<String>,
}

impl Chosen {
    fn offset_at(&self, t: i64) -> f64 {
        match (&self.fit, self.use_fit) {
            (Some(f), true) => f.at(t),
            _ => 0.0,
        }
    }

    /// The bound over a span of `span_ns` corrected at its middle: the fit's drift moves
    /// the offset across it.
    fn bound_over(&self, span_ns: i64) -> f64 {
        match (&self.fit, self.use_fit) {
            (Some(f), true) => self.bound + f.drift_ppm.abs() * 1e-6 * span_ns as f64 / 2.0,
            _ => self.bound,
        }
    }
}

fn choose(fit: Offset, claim: &Claim) -> Chosen {
    let by_fit = Chosen {
        fit: Some(fit),
        use_fit: true,
        bound: fit.bound_ns,
        from: BoundFrom::Exchange,
        disagree: None,
    };
    let Some(cb) = claim.bound_ns else {
        return by_fit;
    };
    let apart = [fit.from_ns, fit.to_ns]
        .iter()
        .map(|&t| fit.at(t).abs() - fit.bound_ns)
        .fold(f64::NEG_INFINITY, f64::max);
    if apart > cb {
        return Chosen {
            disagree: Some(format!(
                "the exchange puts the server's clock {} from the client's (± {}), beyond the clocks' own bound ({}): the clocks disagree",
                super::us(fit.offset_ns),
                super::us(fit.bound_ns),
                claim.words
            )),
            ..by_fit
        };
    }
    if cb <= fit.bound_ns {
        return Chosen {
            use_fit: false,
            bound: cb,
            from: claim.from,
            ..by_fit
        };
    }
    by_fit
}

/// The run's one-way figures and each interval's, from the client's raw tallies.
pub fn resolve(
    total: Option<&OneWayRaw>,
    intervals: &[Option<&OneWayRaw>],
    claim: &Claim,
) -> (Option<OneWay>, Vec<Option<OneWay>>) {
    let Some(whole) = total.and_then(|r| r.tally().ok()) else {
        return (None, intervals.iter().map(|_| None).collect());
    };
    let base = OneWay {
        exchanges: whole.exchanges(),
        exchanges_not_kept: (whole.unkept > 0).then_some(whole.unkept),
        clocks: Some(claim.words.clone()),
        clocks_bound_ns: claim.bound_ns,
        ..OneWay::default()
    };
    let fit = match whole.limits.fit() {
        None => return (Some(base), intervals.iter().map(|_| None).collect()),
        Some(Err(no)) => {
            let fault = format!(
                "no clock offset fits every exchange (their bounds cross by {}): a clock stepped or drifted faster than 1,000 ppm during the run",
                super::us(no.short_ns)
            );
            let faulty = OneWay {
                clock_fault: Some(fault),
                ..base
            };
            return (Some(faulty), intervals.iter().map(|_| None).collect());
        }
        Some(Ok(fit)) => fit,
    };
    let chosen = choose(fit, claim);
    let end = OneWay {
        exchange: Some(fit),
        clocks_disagree: chosen.disagree.clone(),
        ..figures(&whole, &chosen, base)
    };
    let each = intervals
        .iter()
        .map(|r| {
            let t = r.and_then(|r| r.tally().ok())?;
            Some(figures(
                &t,
                &chosen,
                OneWay {
                    exchanges: t.exchanges(),
                    ..OneWay::default()
                },
            ))
        })
        .collect();
    (Some(end), each)
}

/// One tally's delays, corrected at its span's middle.
fn figures(t: &OneWayTally, c: &Chosen, mut out: OneWay) -> OneWay {
    let Some((from, to)) = t.limits.span() else {
        return out;
    };
    let offset = c.offset_at(from + (to - from) / 2);
    let bound = c.bound_over(to - from);
    let low_f = t.forward.min_less(offset);
    let low_r = t.reverse.min_less(-offset);
    if low_f.min(low_r) < -bound - 1.0 {
        let (dir, low) = if low_f < low_r {
            ("forward", low_f)
        } else {
            ("reverse", low_r)
        };
        out.clock_fault = Some(format!(
            "the {dir} delay falls to {}, below zero by more than its bound (± {}, {}): a clock fault, not a delay",
            super::us(low),
            super::us(bound),
            c.from.words()
        ));
        return out;
    }
    out.forward_ns = LatencySummary::of(&t.forward.less(offset).0);
    out.reverse_ns = LatencySummary::of(&t.reverse.less(-offset).0);
    out.bound_ns = Some(bound);
    out.bound_from = Some(c.from);
    out.offset_ns = Some(offset);
    out
}

impl OneWay {
    /// `forward 41.2 ± 3.1 us, reverse 38.9 ± 3.1 us (bound from the exchange; clocks not
    /// synchronised)` at the median, or the clock fault.
    pub fn line(&self) -> String {
        if let Some(f) = &self.clock_fault {
            return format!("one-way: clock fault: {f}");
        }
        let (Some(f), Some(r), Some(b), Some(from)) = (
            &self.forward_ns,
            &self.reverse_ns,
            self.bound_ns,
            self.bound_from,
        ) else {
            return "one-way: no message had both ends' stamps".into();
        };
        let mut why = from.words().to_string();
        if let Some(c) = self.clocks.as_ref().filter(|_| from != BoundFrom::OneClock) {
            why = format!("{why}; {c}");
        }
        if self.clocks_disagree.is_some() {
            why.push_str("; the clocks disagree beyond their bounds");
        }
        format!(
            "one-way P50: forward {} ± {}, reverse {} ± {} ({why})",
            super::us(f.p50 as f64),
            super::us(b),
            super::us(r.p50 as f64),
            super::us(b)
        )
    }
}
