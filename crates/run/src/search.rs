//! RFC 2544 throughput search for `sonde pps --search`: the highest packet rate whose loss
//! stays within a limit, found by binary search over whole trials (each a full test against
//! the agent). The first trial runs unthrottled to find the ceiling; the second tries what
//! the receiver managed then; steps up from a pass, doubling, bracket the rate, bisection
//! closes in from there, and a last trial at the result confirms it. Bounds are the rates the sender measured itself sending, never the
//! offered ones: a paced sender that stalls drops its deficit and may send less than asked.

use sonde_results::document::{SearchEnd, Trial};
use sonde_results::{Document, PpsSpec, TestSpec};

/// What a trial's runner may fail with.
pub type TrialError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("trial {trial} ended without figures: {why}")]
    NoFigures { trial: usize, why: String },
    #[error(transparent)]
    Trial(TrialError),
}

/// Most trials a search may run: bisection from ~1 Mpps to 1 % takes fewer.
const MAX_TRIALS: usize = 24;

/// A sender more than this fraction below its offered rate fell short of it.
const SENDER_SHORTFALL: f64 = 0.02;

/// Times a trial whose sender fell short is run again at the same rate: a sender stalled
/// for a moment (on a busy host) says nothing about the path. A pass would end the search
/// below what the path carries; a failure, whose pacer caught up in a burst after the
/// stall, would bound it by the short rate and discard the passes above it.
const SHORT_RETRIES: u32 = 2;

pub struct SearchParams {
    pub max_loss_percent: f64,
    /// Stop when (high - low) / high is below this, percent.
    pub resolution_percent: f64,
    /// Trials at each rate; the worst decides.
    pub trials_per_step: u32,
}

/// What one trial measured, read from its document.
pub fn trial_of(doc: &Document, offered: Option<f64>, max_loss: f64) -> Option<Trial> {
    let p = doc.end.pps()?.packets.as_ref()?;
    let sent_pps = p.sender.as_ref()?.packets_per_second;
    let received_pps = p.receiver.as_ref()?.packets_per_second;
    let lost = p.lost_packets?;
    let loss = p.loss_percent?;
    Some(Trial {
        offered_pps: offered,
        sent_pps,
        received_pps,
        lost_packets: lost,
        loss_percent: loss,
        passed: !doc.end.partial && loss <= max_loss,
        sender_short: offered.is_some_and(|o| sent_pps < o * (1.0 - SENDER_SHORTFALL)),
        verification: false,
    })
}

/// A rate that passed: the rate offered (for an unthrottled trial, what it sent), the
/// rate the sender measured itself sending, its document, and whether the sender was the
/// limit there (unthrottled, or short of the offered rate).
struct Passed {
    offered: f64,
    pps: f64,
    doc: Document,
    sender_bound: bool,
}

struct Searcher<'a> {
    base: &'a PpsSpec,
    params: &'a SearchParams,
    run: &'a mut dyn FnMut(&TestSpec) -> Result<Document, TrialError>,
    on_trial: &'a mut dyn FnMut(&Trial),
    trials: Vec<Trial>,
}

impl Searcher<'_> {
    /// Runs one trial at `rate` and records it.
    fn trial(
        &mut self,
        rate: Option<f64>,
        verification: bool,
    ) -> Result<(Trial, Document), SearchError> {
        let spec = PpsSpec {
            rate_pps: rate,
            ..self.base.clone()
        };
        let doc = (self.run)(&TestSpec::Pps(spec)).map_err(SearchError::Trial)?;
        let Some(mut t) = trial_of(&doc, rate, self.params.max_loss_percent) else {
            return Err(SearchError::NoFigures {
                trial: self.trials.len() + 1,
                why: doc
                    .end
                    .error
                    .clone()
                    .unwrap_or_else(|| "unknown error".into()),
            });
        };
        t.verification = verification;
        (self.on_trial)(&t);
        self.trials.push(t.clone());
        Ok((t, doc))
    }

    /// Runs one step at `rate` (`None`: unthrottled): `trials_per_step` trials, stopping
    /// at the first failure, each whose sender fell short run again up to `SHORT_RETRIES`
    /// times. Returns the worst trial and its document.
    fn step(
        &mut self,
        rate: Option<f64>,
        verification: bool,
    ) -> Result<(Trial, Document), SearchError> {
        let mut worst: Option<(Trial, Document)> = None;
        for _ in 0..self.params.trials_per_step.max(1) {
            let (mut t, mut doc) = self.trial(rate, verification)?;
            for _ in 0..SHORT_RETRIES {
                if !t.sender_short || self.trials.len() >= MAX_TRIALS {
                    break;
                }
                (t, doc) = self.trial(rate, verification)?;
            }
            let failed = !t.passed;
            let worse = worst.as_ref().is_none_or(|(w, _)| {
                (w.passed && failed) || (w.passed == t.passed && t.sent_pps < w.sent_pps)
            });
            if worse {
                worst = Some((t, doc));
            }
            if failed {
                break;
            }
        }
        Ok(worst.expect("at least one trial per step"))
    }

    fn room(&self) -> bool {
        self.trials.len() + self.params.trials_per_step.max(1) as usize <= MAX_TRIALS
    }
}

/// Runs trials through `run` until the rate is known to the resolution and confirmed.
/// Returns the search's document: the best passing trial's (or the last trial's, when
/// none passed) with the search in its section, assembled once the search has ended.
pub fn search(
    base: &PpsSpec,
    params: &SearchParams,
    run: &mut dyn FnMut(&TestSpec) -> Result<Document, TrialError>,
    on_trial: &mut dyn FnMut(&Trial),
) -> Result<Document, SearchError> {
    let mut s = Searcher {
        base,
        params,
        run,
        on_trial,
        trials: Vec::new(),
    };
    // Bisection runs over offered rates (a pacer lands a little under what it is offered,
    // so measured rates would not move it); a failure bounds from above by the lower of
    // what was offered and what was sent; the result is a rate the sender measured.
    let mut passes: Vec<Passed> = Vec::new();
    let mut last_doc = None;
    let mut high = f64::INFINITY;
    let mut next: Option<f64> = None;
    // Above a pass, the next rate is first a step away, the step doubling with each pass
    // (an exponential search), until a failure brackets the rate; then bisection. Halving
    // towards the unthrottled ceiling took a trial per halving where the path drops near
    // what the flood delivered, the usual case (a path of 400 k packets/s to 1 %: 11 trials, now 6).
    let mut step_up = 4.0 * params.resolution_percent / 100.0;
    let mut bracketed = false;
    // The best pass below the lowest failure: a pass above it was luck.
    let best_index = |passes: &[Passed], high: f64| {
        (0..passes.len())
            .filter(|&i| passes[i].offered < high)
            .max_by(|&a, &b| passes[a].offered.total_cmp(&passes[b].offered))
    };
    while s.room() {
        let (t, doc) = s.step(next, false)?;
        let unthrottled = next.is_none();
        let offered = next.unwrap_or(t.sent_pps);
        if t.passed {
            // Unthrottled, or short of the offered rate: the sender reaches no higher.
            let sender_bound = unthrottled || t.sender_short;
            if sender_bound {
                high = high.min(offered * (1.0 + 1e-9));
            }
            passes.push(Passed {
                offered,
                pps: t.sent_pps,
                doc,
                sender_bound,
            });
        } else {
            high = high.min(offered.min(t.sent_pps));
            bracketed |= !unthrottled;
            last_doc = Some(doc);
        }
        let low = best_index(&passes, high).map_or(0.0, |i| passes[i].offered);
        if high.is_finite() && (high - low) / high * 100.0 < params.resolution_percent {
            // Confirm the result with one more step at it; a failure lowers the bound.
            if low == 0.0 || !s.room() {
                break;
            }
            let (v, vdoc) = s.step(Some(low), true)?;
            if v.passed {
                break;
            }
            high = low;
            last_doc = Some(vdoc);
        }
        let low = best_index(&passes, high).map_or(0.0, |i| passes[i].offered);
        let middle = (low + high) / 2.0;
        next = Some(if unthrottled && !t.passed {
            t.received_pps.min(high) * 0.999
        } else if !bracketed && low > 0.0 && low * (1.0 + step_up) < middle {
            step_up *= 2.0;
            low * (1.0 + step_up / 2.0)
        } else {
            middle
        });
    }
    let best = best_index(&passes, high).map(|i| passes.swap_remove(i));
    let (found, trial) = conclude(base, params, s.trials, best, last_doc);
    Ok(sonde_results::document::search::assemble(trial, found))
}

/// The search's result from its best pass (or none), and the document to keep.
fn conclude(
    base: &PpsSpec,
    params: &SearchParams,
    trials: Vec<Trial>,
    best: Option<Passed>,
    last_doc: Option<Document>,
) -> (SearchEnd, Document) {
    let limited_by = match &best {
        None => "none_passed",
        Some(b) if b.sender_bound => "sender",
        Some(_) => "loss",
    };
    let result_pps = best.as_ref().map_or(0.0, |b| b.pps);
    let doc = best
        .map(|b| b.doc)
        .or(last_doc)
        .expect("at least one trial ran");
    (
        SearchEnd {
            max_loss_percent: params.max_loss_percent,
            trial_ms: base.timing.duration_ms,
            trials,
            result_pps,
            trials_per_step: params.trials_per_step.max(1),
            limited_by: limited_by.into(),
        },
        doc,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::document::CpuFigures;
    use sonde_results::document::{End, MeasuredBy, PacketsEnd, PpsEnd, PpsEndSide, Section};
    use sonde_results::side::Role;

    fn side(role: Role, pps: f64) -> PpsEndSide {
        PpsEndSide {
            by: MeasuredBy {
                measured_by: role,
                host: "h".into(),
                engine: None,
                threads: 1,
                pinned_cpus: None,
                bypass: None,
                cpu_latency: None,
                stamps: None,
            },
            poll: "block".into(),
            seconds: 1.0,
            packets: pps as u64,
            packets_per_second: pps,
            bits_per_second: pps * 512.0,
            total_packets: pps as u64,
            cpu: CpuFigures {
                usage: None,
                process_cpu_s: None,
                worker_cpus: Vec::new(),
                workers: Vec::new(),
            },
            port: None,
            blocked_sends: None,
            counted: Default::default(),
        }
    }

    /// The search's result, as its document holds it, and the document.
    fn searched(
        base: &PpsSpec,
        params: &SearchParams,
        run: &mut dyn FnMut(&TestSpec) -> Result<Document, TrialError>,
        on_trial: &mut dyn FnMut(&Trial),
    ) -> Result<(SearchEnd, Document), SearchError> {
        let doc = search(base, params, run, on_trial)?;
        let found = doc.end.pps().and_then(|p| p.search.clone());
        Ok((found.expect("the search's document holds it"), doc))
    }

    fn zero_loss_to_1_percent() -> SearchParams {
        SearchParams {
            max_loss_percent: 0.0,
            resolution_percent: 1.0,
            trials_per_step: 1,
        }
    }

    /// A link that passes at most `capacity` packets/s; the sender manages `ceiling`.
    fn simulated(spec: &TestSpec, capacity: f64, ceiling: f64) -> Document {
        let TestSpec::Pps(p) = spec else {
            unreachable!()
        };
        let sent = p.rate_pps.unwrap_or(ceiling).min(ceiling);
        let received = sent.min(capacity);
        let lost = (sent - received).round() as u64;
        let packets = Some(PacketsEnd {
            size_bytes: 64,
            udp_payload_bytes: 22,
            flows: 1,
            sender: Some(side(Role::Client, sent)),
            receiver: Some(side(Role::Server, received)),
            lost_packets: Some(lost),
            loss_percent: Some(lost as f64 * 100.0 / sent),
            reordered_packets: Some(0),
            duplicated_packets: Some(0),
            socket_drops: Some(0),
            receiver_to_sender_ratio: Some(received / sent),
            flows_with_loss: Some(0),
            uncounted_packets: None,
            marks: None,
            jitter: None,
        });
        let pps = PpsEnd {
            packets,
            ..Default::default()
        };
        let end = End::new(false, None, Section::Pps(pps));
        crate::tests::local_doc(spec, end)
    }

    /// `simulated`, with a paced sender that sends `fraction` of its offered rate.
    fn sending_short(spec: &TestSpec, fraction: f64, capacity: f64) -> Document {
        let TestSpec::Pps(p) = spec else {
            unreachable!()
        };
        let sent = PpsSpec {
            rate_pps: p.rate_pps.map(|r| r * fraction),
            ..p.clone()
        };
        let mut d = simulated(&TestSpec::Pps(sent), capacity, 1e6);
        d.start.spec = spec.clone();
        d
    }

    #[test]
    fn finds_the_capacity_to_the_resolution() {
        let params = zero_loss_to_1_percent();
        let (s, doc) = searched(
            &PpsSpec::default(),
            &params,
            &mut |spec| Ok(simulated(spec, 400_000.0, 1_000_000.0)),
            &mut |_| {},
        )
        .unwrap();
        assert!(
            s.result_pps <= 400_000.0 && s.result_pps > 396_000.0,
            "{}",
            s.result_pps
        );
        assert!(s.trials.len() <= MAX_TRIALS);
        assert!(!s.trials[0].passed && s.trials[0].offered_pps.is_none());
        assert!(
            doc.end
                .pps()
                .unwrap()
                .packets
                .as_ref()
                .unwrap()
                .lost_packets
                == Some(0)
        );
        assert_eq!(s.limited_by, "loss");
        let last = s.trials.last().unwrap();
        assert!(last.verification && last.passed, "{last:?}");
        assert_eq!(last.offered_pps, Some(s.result_pps));
    }

    #[test]
    fn loss_free_at_full_speed_is_sender_limited_and_verified() {
        let params = zero_loss_to_1_percent();
        let (s, _) = searched(
            &PpsSpec::default(),
            &params,
            &mut |spec| Ok(simulated(spec, 2e6, 1e6)),
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(s.trials.len(), 2, "{:?}", s.trials);
        assert!(s.trials[1].verification);
        assert_eq!(s.result_pps, 1e6);
        assert_eq!(s.limited_by, "sender");
    }

    /// The sender sends 95 % of what it is offered (a pacer that drops its deficit).
    #[test]
    fn bounds_come_from_the_measured_sent_rate() {
        let params = zero_loss_to_1_percent();
        let capacity = 400_000.0;
        let (s, _) = searched(
            &PpsSpec::default(),
            &params,
            &mut |spec| Ok(sending_short(spec, 0.95, capacity)),
            &mut |_| {},
        )
        .unwrap();
        // No trial may pass above the capacity, and the result is a rate really sent.
        assert!(s.result_pps <= capacity, "{}", s.result_pps);
        assert!(s.trials.iter().any(|t| t.sender_short));
        assert_eq!(s.limited_by, "sender");
        assert!(s
            .trials
            .iter()
            .any(|t| t.passed && t.sent_pps == s.result_pps));
    }

    /// The sender stalls in the first trial at each rate, then keeps up: the stalled trials
    /// are run again, and the search converges on the path, not on the stalls.
    #[test]
    fn a_sender_that_stalled_is_given_another_trial() {
        let params = zero_loss_to_1_percent();
        let mut seen: Vec<u64> = Vec::new();
        let (s, _) = searched(
            &PpsSpec::default(),
            &params,
            &mut |spec| {
                let TestSpec::Pps(p) = spec else {
                    unreachable!()
                };
                let key = p.rate_pps.map_or(0, |r| r as u64);
                let stalled = p.rate_pps.is_some() && !seen.contains(&key);
                seen.push(key);
                Ok(sending_short(
                    spec,
                    if stalled { 0.9 } else { 1.0 },
                    400_000.0,
                ))
            },
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(s.limited_by, "loss", "{:?}", s.trials);
        assert!(
            s.result_pps > 396_000.0 && s.result_pps <= 400_000.0,
            "{}",
            s.result_pps
        );
        assert!(s.trials.iter().any(|t| t.passed && t.sender_short));
        assert!(s.trials.len() <= MAX_TRIALS);
    }

    /// Every third trial above 350k loses: with three trials per step the worst decides.
    #[test]
    fn trials_per_step_take_the_worst() {
        let run = |per_step: u32| {
            let params = SearchParams {
                max_loss_percent: 0.0,
                resolution_percent: 1.0,
                trials_per_step: per_step,
            };
            let mut n = 0;
            let (s, _) = searched(
                &PpsSpec::default(),
                &params,
                &mut |spec| {
                    n += 1;
                    let TestSpec::Pps(p) = spec else {
                        unreachable!()
                    };
                    let flaky = n % 3 == 0 && p.rate_pps.is_some_and(|r| r > 350_000.0);
                    Ok(simulated(
                        spec,
                        if flaky { 300_000.0 } else { 400_000.0 },
                        1e6,
                    ))
                },
                &mut |_| {},
            )
            .unwrap();
            s
        };
        let three = run(3);
        assert!(three.result_pps <= 350_000.0, "{}", three.result_pps);
        assert_eq!(three.trials_per_step, 3);
        assert!(three.trials.len() <= MAX_TRIALS);
    }

    #[test]
    fn a_loss_allowance_raises_the_result() {
        let strict = SearchParams {
            max_loss_percent: 0.0,
            resolution_percent: 0.5,
            trials_per_step: 1,
        };
        let loose = SearchParams {
            max_loss_percent: 10.0,
            resolution_percent: 0.5,
            trials_per_step: 1,
        };
        let run = &mut |spec: &TestSpec| Ok(simulated(spec, 400_000.0, 1_000_000.0));
        let (a, _) = searched(&PpsSpec::default(), &strict, run, &mut |_| {}).unwrap();
        let (b, _) = searched(&PpsSpec::default(), &loose, run, &mut |_| {}).unwrap();
        assert!(
            b.result_pps > a.result_pps * 1.05,
            "{} vs {}",
            b.result_pps,
            a.result_pps
        );
    }

    /// Where the path drops near what the unthrottled trial delivered, the steps up from
    /// the first pass bracket it at once: 6 trials to 1 %, where halving from the
    /// ceiling took 11 (the flood, its received rate, 8 halvings, the confirmation).
    #[test]
    fn a_capacity_near_the_floods_delivery_is_bracketed_in_few_trials() {
        let (s, _) = searched(
            &PpsSpec::default(),
            &zero_loss_to_1_percent(),
            &mut |spec| Ok(simulated(spec, 400_000.0, 1_000_000.0)),
            &mut |_| {},
        )
        .unwrap();
        let offered: Vec<_> = s.trials.iter().map(|t| t.offered_pps).collect();
        assert_eq!(s.trials.len(), 6, "{offered:?}");
        assert!(s.result_pps > 396_000.0 && s.result_pps <= 400_000.0);
    }

    /// A receiver the flood overwhelmed (it delivered a third of what the path carries,
    /// paced): the steps double until one fails, and bisection still finds the capacity.
    #[test]
    fn a_capacity_far_above_the_floods_delivery_is_still_found() {
        let run = &mut |spec: &TestSpec| {
            let TestSpec::Pps(p) = spec else {
                unreachable!()
            };
            let capacity = if p.rate_pps.is_none() {
                300_000.0
            } else {
                900_000.0
            };
            Ok(simulated(spec, capacity, 1_000_000.0))
        };
        let (s, _) = searched(
            &PpsSpec::default(),
            &zero_loss_to_1_percent(),
            run,
            &mut |_| {},
        )
        .unwrap();
        assert!(
            s.result_pps > 891_000.0 && s.result_pps <= 900_000.0,
            "{} after {:?}",
            s.result_pps,
            s.trials.iter().map(|t| t.offered_pps).collect::<Vec<_>>()
        );
        assert_eq!(s.limited_by, "loss");
        assert!(s.trials.len() <= MAX_TRIALS);
    }
}
