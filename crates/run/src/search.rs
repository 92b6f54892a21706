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
    // The rate the last passing trial at the result sent (its confirmation).
    let mut verified_pps: Option<f64> = None;
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
                verified_pps = Some(v.sent_pps);
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
    let (found, trial) = conclude(base, params, s.trials, best, last_doc, verified_pps);
    Ok(sonde_results::document::search::assemble(trial, found))
}

/// The search's result from its best pass (or none), and the document to keep; the
/// result is confirmed when its last trial (`verified_pps`: what that sent) passed sending
/// at least the result's rate: one whose sender fell short says nothing of it.
fn conclude(
    base: &PpsSpec,
    params: &SearchParams,
    trials: Vec<Trial>,
    best: Option<Passed>,
    last_doc: Option<Document>,
    verified_pps: Option<f64>,
) -> (SearchEnd, Document) {
    let limited_by = match &best {
        None => "none_passed",
        Some(b) if b.sender_bound => "sender",
        Some(_) => "loss",
    };
    let result_pps = best.as_ref().map_or(0.0, |b| b.pps);
    let confirmed =
        best.is_some() && verified_pps.is_some_and(|v| v >= result_pps * (1.0 - SENDER_SHORTFALL));
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
            confirmed: Some(confirmed),
        },
        doc,
    )
}

#[cfg(test)]
#[path = "search_tests.rs"]
mod tests;
