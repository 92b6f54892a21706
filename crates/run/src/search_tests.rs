//! The search against simulated paths and senders: capacity found to the resolution,
//! bounds from the rates really sent, stalled senders given another trial, the result
//! confirmed only by a last trial that sent its rate.

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
    assert_eq!(s.confirmed, Some(true));
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
    assert_eq!(s.confirmed, Some(true));
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
    // Short of what it was offered, the last trial still sent the result's rate.
    assert_eq!(s.confirmed, Some(true), "{:?}", s.trials);
}

/// A path of 400k packets/s whose paced sender falls 10 % short at each rate's first
/// trial (`at_first`), or at each trial at a rate offered before.
fn short_at(at_first: bool) -> impl FnMut(&TestSpec) -> Result<Document, TrialError> {
    let mut seen: Vec<u64> = Vec::new();
    move |spec| {
        let TestSpec::Pps(p) = spec else {
            unreachable!()
        };
        let key = p.rate_pps.map_or(0, |r| r as u64);
        let short = p.rate_pps.is_some() && seen.contains(&key) != at_first;
        seen.push(key);
        Ok(sending_short(
            spec,
            if short { 0.9 } else { 1.0 },
            400_000.0,
        ))
    }
}

/// The sender keeps up with each rate's first trial and falls 10 % short of any rate
/// offered again: the confirmation and its reruns pass short. The result stays the
/// first pass's rate, and the search says it went unconfirmed.
#[test]
fn a_confirmation_whose_sender_fell_short_leaves_the_result_unconfirmed() {
    let params = zero_loss_to_1_percent();
    let (s, _) = searched(
        &PpsSpec::default(),
        &params,
        &mut short_at(false),
        &mut |_| {},
    )
    .unwrap();
    let confirmations: Vec<_> = s.trials.iter().filter(|t| t.verification).collect();
    assert_eq!(
        confirmations.len(),
        1 + SHORT_RETRIES as usize,
        "{:?}",
        s.trials
    );
    assert!(
        confirmations.iter().all(|t| t.passed && t.sender_short),
        "{confirmations:?}"
    );
    assert!(
        s.result_pps > 396_000.0 && s.result_pps <= 400_000.0,
        "{}",
        s.result_pps
    );
    assert_eq!(s.confirmed, Some(false));
}

/// The sender stalls in the first trial at each rate, then keeps up: the stalled trials
/// are run again, and the search converges on the path, not on the stalls.
#[test]
fn a_sender_that_stalled_is_given_another_trial() {
    let params = zero_loss_to_1_percent();
    let (s, _) = searched(
        &PpsSpec::default(),
        &params,
        &mut short_at(true),
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
