//! RFC 2544 throughput search for `sonde pps --search`: the highest offered packet rate
//! whose loss stays within a limit, found by binary search over whole trials (each a full
//! test against the agent). The first trial runs unthrottled to find the ceiling; the
//! second tries what the receiver managed then; bisection closes in from there.

use sonde_results::document::{SearchEnd, Trial};
use sonde_results::{Document, PpsSpec, TestSpec};

/// Most trials a search may run: bisection from ~1 Mpps to 1 % takes fewer.
const MAX_TRIALS: usize = 16;

pub struct SearchParams {
    pub max_loss_percent: f64,
    /// Stop when (high - low) / high is below this, percent.
    pub resolution_percent: f64,
}

/// What one trial measured, read from its document.
pub fn trial_of(doc: &Document, offered: Option<f64>, max_loss: f64) -> Option<Trial> {
    let p = doc.end.packets.as_ref()?;
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
    })
}

/// Runs trials through `run` until the rate is known to the resolution. Returns the search
/// and the document of the best passing trial (or of the last trial, when none passed).
pub fn search(
    base: &PpsSpec,
    params: &SearchParams,
    run: &mut dyn FnMut(&TestSpec) -> anyhow::Result<Document>,
    on_trial: &mut dyn FnMut(&Trial),
) -> anyhow::Result<(SearchEnd, Document)> {
    let mut trials: Vec<Trial> = Vec::new();
    let mut best: Option<(f64, Document)> = None;
    let mut last_doc = None;
    let mut low = 0.0f64;
    let mut high = f64::INFINITY;
    let mut next: Option<f64> = None;
    while trials.len() < MAX_TRIALS {
        let spec = PpsSpec {
            rate_pps: next,
            ..base.clone()
        };
        let doc = run(&TestSpec::Pps(spec))?;
        let Some(t) = trial_of(&doc, next, params.max_loss_percent) else {
            anyhow::bail!(
                "trial {} ended without figures: {}",
                trials.len() + 1,
                doc.end.error.as_deref().unwrap_or("unknown error")
            );
        };
        on_trial(&t);
        let unthrottled = next.is_none();
        // Bisect over offered rates; a sender held back by its own host (socket buffers
        // full behind a shaper) sends less than offered, and the result is what it sent.
        let offered = next.unwrap_or(t.sent_pps);
        if t.passed {
            low = low.max(offered);
            if best.as_ref().is_none_or(|(r, _)| t.sent_pps > *r) {
                best = Some((t.sent_pps, doc));
            } else {
                last_doc = Some(doc);
            }
        } else {
            high = high.min(offered);
            last_doc = Some(doc);
        }
        let received = t.received_pps;
        trials.push(t);
        if unthrottled && trials.last().is_some_and(|t| t.passed) {
            break; // loss-free as fast as the sender goes: that is the answer
        }
        if high.is_finite() && (high - low) / high * 100.0 < params.resolution_percent {
            break;
        }
        next = Some(if trials.len() == 1 {
            received.min(high) * 0.999
        } else {
            (low + high) / 2.0
        });
    }
    let result_pps = best.as_ref().map_or(0.0, |(r, _)| *r);
    let doc = best
        .map(|(_, d)| d)
        .or(last_doc)
        .expect("at least one trial ran");
    Ok((
        SearchEnd {
            max_loss_percent: params.max_loss_percent,
            trial_ms: base.duration_ms,
            trials,
            result_pps,
        },
        doc,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::document::CpuFigures;
    use sonde_results::document::{End, PacketsEnd, PpsEndSide, Start};
    use sonde_results::side::Role;

    fn side(role: Role, pps: f64) -> PpsEndSide {
        PpsEndSide {
            measured_by: role,
            host: "h".into(),
            threads: 1,
            pinned_cpus: None,
            poll: "block".into(),
            seconds: 1.0,
            packets: pps as u64,
            packets_per_second: pps,
            bits_per_second: pps * 512.0,
            total_packets: pps as u64,
            cpu: CpuFigures {
                usage: None,
                process_cpu_s: None,
            },
            nic: None,
            interrupts: None,
            notes: vec![],
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
        let mut end: End = serde_json::from_value(serde_json::json!({"partial": false, "error": null, "sender": null, "receiver": null, "reverse": null})).unwrap();
        end.packets = Some(PacketsEnd {
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
        });
        Document {
            schema_version: 1,
            test: "pps".into(),
            start: Start {
                spec: spec.clone(),
                command: String::new(),
                server_command: None,
                client: Default::default(),
                server: None,
                server_address: String::new(),
                started_at: String::new(),
                software: String::new(),
            },
            intervals: vec![],
            end,
        }
    }

    #[test]
    fn finds_the_capacity_to_the_resolution() {
        let params = SearchParams {
            max_loss_percent: 0.0,
            resolution_percent: 1.0,
        };
        let (s, doc) = search(
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
        assert!(doc.end.packets.unwrap().lost_packets == Some(0));
    }

    #[test]
    fn loss_free_at_full_speed_stops_after_one_trial() {
        let params = SearchParams {
            max_loss_percent: 0.0,
            resolution_percent: 1.0,
        };
        let (s, _) = search(
            &PpsSpec::default(),
            &params,
            &mut |spec| Ok(simulated(spec, 2e6, 1e6)),
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(s.trials.len(), 1);
        assert_eq!(s.result_pps, 1e6);
    }

    #[test]
    fn a_loss_allowance_raises_the_result() {
        let strict = SearchParams {
            max_loss_percent: 0.0,
            resolution_percent: 0.5,
        };
        let loose = SearchParams {
            max_loss_percent: 10.0,
            resolution_percent: 0.5,
        };
        let run = &mut |spec: &TestSpec| Ok(simulated(spec, 400_000.0, 1_000_000.0));
        let (a, _) = search(&PpsSpec::default(), &strict, run, &mut |_| {}).unwrap();
        let (b, _) = search(&PpsSpec::default(), &loose, run, &mut |_| {}).unwrap();
        assert!(
            b.result_pps > a.result_pps * 1.05,
            "{} vs {}",
            b.result_pps,
            a.result_pps
        );
    }
}
