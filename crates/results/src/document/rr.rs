//! A ping or rpc test's document: latency and rate from the client, CPU per message from
//! both sides.

use serde::{Deserialize, Serialize};

use super::floor::{RrPrelude, SelfNoise};
use super::interval::{paired, IntervalFigures, IntervalSection};
use super::parts::{per_second, CpuFigures, HostCounted, Inputs, MeasuredBy, Prelude};
use super::rr_interval::RrInterval;
use crate::latency::LatencySummary;
use crate::oneway::{claim, resolve, Claim, ClockEnd};
use crate::side::{IntervalSample, Role, SideResult};
use crate::spec::{RrSpec, Transport};

/// `end.client` / `end.server` of a request/response test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrEndSide {
    #[serde(flatten)]
    pub by: MeasuredBy,
    pub poll: String,
    pub seconds: f64,
    /// Client: responses received; server: responses sent.
    pub messages: u64,
    pub messages_per_second: f64,
    /// Client: requests sent over the whole test, warm-up and drain included.
    pub requests_sent: Option<u64>,
    pub cpu: CpuFigures,
    /// This side's process CPU time per message: the cost of its receive mode.
    pub cpu_us_per_message: Option<f64>,
    /// The workers' system calls per message over the whole test (kernel and io_uring
    /// engines): what io_uring's batching saves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls_per_message: Option<f64>,
    pub socket_options: Vec<String>,
    pub tcp_retransmits: Option<u64>,
    #[serde(flatten)]
    pub counted: HostCounted,
}

/// A ping or rpc test's section of `end`: the client's latency and rate, what never
/// completed, and both sides.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RrEnd {
    /// Round-trip latency measured by the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<LatencySummary>,
    /// What `latency_ns` measures: `round_trip_time`, from the actual send (closed loop) or
    /// from the intended send time (open loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_is: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<f64>,
    /// Requests sent and never answered by the end of the test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unanswered_requests: Option<u64>,
    /// Open loop: requests due but never sent (every slot of the window was waiting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsent_requests: Option<u64>,
    /// UDP: requests whose answer never came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_messages: Option<u64>,
    /// UDP: replies matched by sequence number to a request already counted lost (late),
    /// already answered (duplicated), or to none sent (foreign); none is credited to
    /// another request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_replies: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicated_replies: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign_replies: Option<u64>,
    /// UDP: datagrams the agent's echo dropped unanswered: from another address, not the
    /// request's length, or without the test's cookie (so never reflected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<RrEndSide>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<RrEndSide>,
    /// The tool's own floor (`--self-noise`), measured by the controller before the test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_noise: Option<SelfNoise>,
    /// `--stages`: where the round trips' time went, from both ends' kernel timestamps
    /// (the client pairs them per message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<crate::stages::Stages>,
    /// `--stages`: each direction's delay, within a stated bound (`oneway::resolve`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oneway: Option<Box<crate::oneway::OneWay>>,
    /// UDP with `--dscp`/`--ecn`: what the path did to the marks, forward as the agent
    /// received the requests and reverse as the client received the answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<Box<crate::marks::Fate>>,
}

impl RrEnd {
    /// Clears both sides' host CPU (the one host's, counted once elsewhere).
    pub(crate) fn clear_host_cpu(&mut self) {
        for s in self.client.iter_mut().chain(self.server.iter_mut()) {
            s.cpu.usage = None;
        }
    }
}

/// The intervals and end section of a ping or rpc test.
pub(crate) fn build(spec: &RrSpec, inp: &Inputs<'_>) -> (Vec<IntervalFigures>, RrEnd) {
    let udp = spec.transport == Transport::Udp;
    let c_rr = inp.client.rr();
    let mut client = end_side(inp.client);
    let self_noise = floor(inp.prelude.as_ref(), client.as_mut());
    let pairs: Vec<_> = paired(inp.client_intervals, inp.server_intervals).collect();
    let raws: Vec<_> = pairs
        .iter()
        .map(|(_, c, _)| c.and_then(|c| c.rr()).and_then(|r| r.oneway.as_deref()))
        .collect();
    let (oneway, each_way) = resolve(
        c_rr.and_then(|r| r.oneway.as_deref()),
        &raws,
        &claim_of(inp),
    );
    let intervals = pairs
        .into_iter()
        .zip(each_way)
        .map(|((span, c, s), oneway)| IntervalFigures {
            section: IntervalSection::Rr(RrInterval {
                oneway: oneway.map(Box::new),
                ..interval(c, span.end_s - span.start_s)
            }),
            client_cpu_busy_percent: c.and_then(|c| c.cpu_busy_percent),
            server_cpu_busy_percent: s.and_then(|s| s.cpu_busy_percent),
            ..span
        })
        .collect();
    let end = RrEnd {
        latency_ns: c_rr.and_then(|r| r.latency_ns.clone()),
        latency_is: Some(
            if spec.open_loop {
                "round_trip_time_from_intended_send"
            } else {
                "round_trip_time"
            }
            .into(),
        ),
        requests_per_second: client.as_ref().map(|c| c.messages_per_second),
        unanswered_requests: c_rr.map(|r| r.unanswered),
        unsent_requests: c_rr.filter(|_| spec.open_loop).map(|r| r.not_sent),
        lost_messages: c_rr.filter(|r| r.lost > 0).map(|r| r.lost),
        late_replies: c_rr.filter(|_| udp).map(|r| r.late),
        duplicated_replies: c_rr.filter(|_| udp).map(|r| r.duplicated),
        foreign_replies: c_rr.filter(|_| udp).map(|r| r.foreign),
        rejected_requests: inp
            .server
            .and_then(|s| s.rr())
            .filter(|_| udp)
            .map(|r| r.foreign),
        server: inp.server.and_then(end_side),
        stages: c_rr.and_then(|r| r.stages.clone()),
        oneway: oneway.map(Box::new),
        marks: marks_of(inp),
        client,
        self_noise,
    };
    (intervals, end)
}

/// Each direction's marks as its receiver counted them, when either did.
fn marks_of(inp: &Inputs<'_>) -> Option<Box<crate::marks::Fate>> {
    let fate = crate::marks::Fate {
        forward: inp
            .server
            .and_then(|s| s.rr())
            .and_then(|r| r.marks.clone()),
        reverse: inp.client.rr().and_then(|r| r.marks.clone()),
    };
    (fate.forward.is_some() || fate.reverse.is_some()).then(|| Box::new(fate))
}

/// The client's figures of one interval of `secs`.
fn interval(client: Option<&IntervalSample>, secs: f64) -> RrInterval {
    let rr = client.and_then(|c| c.rr());
    RrInterval {
        requests_per_second: rr.map(|r| per_second(r.messages as f64, secs)),
        latency_ns: rr.and_then(|r| r.latency_ns.clone()),
        stages: rr.and_then(|r| r.stages.clone()),
        oneway: None,
    }
}

/// What both ends' clocks claim about their offset, from the clock each side reported.
fn claim_of<'a>(inp: &Inputs<'a>) -> Claim {
    let end = |s: &'a SideResult| ClockEnd {
        boot_id: s.host.boot_id.as_deref(),
        clock: s.host.inventory.as_ref().and_then(|i| i.clock.as_ref()),
    };
    claim(end(inp.client), inp.server.map(end).unwrap_or_default())
}

/// The floor measured before the test, or why there is none on the client's side: a
/// floor that failed is a note, not a failed test.
fn floor(prelude: Option<&Prelude>, client: Option<&mut RrEndSide>) -> Option<SelfNoise> {
    let Some(Prelude::Rr(RrPrelude { self_noise })) = prelude else {
        return None;
    };
    match self_noise {
        Ok(floor) => Some(floor.clone()),
        Err(why) => {
            if let Some(c) = client {
                let note = format!("tool floor (--self-noise) not measured: {why}");
                c.counted.notes.push(note);
            }
            None
        }
    }
}

fn end_side(side: &SideResult) -> Option<RrEndSide> {
    let rr = side.rr()?;
    let secs = side.window_s;
    Some(RrEndSide {
        by: MeasuredBy::of(side),
        poll: rr.poll.clone(),
        seconds: secs,
        messages: rr.messages,
        messages_per_second: per_second(rr.messages as f64, secs),
        requests_sent: (side.role == Role::Client).then_some(rr.sent),
        cpu: CpuFigures::of(side),
        cpu_us_per_message: side
            .process_cpu_s
            .filter(|_| rr.messages > 0)
            .map(|c| c * 1e6 / rr.messages as f64),
        syscalls_per_message: rr
            .syscalls
            .filter(|s| s.messages > 0)
            .map(|s| s.calls as f64 / s.messages as f64),
        socket_options: rr.socket_options.clone(),
        tcp_retransmits: side.tcp_retransmits,
        counted: HostCounted::of(side),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::new_histogram;
    use crate::side::{HostInfo, RrResult, RrSample, SampleSection, SideSection};
    use crate::spec::TestSpec;
    use crate::Document;

    fn client() -> SideResult {
        let mut c = SideResult::new(Role::Client, HostInfo::default(), 2.0, (1, None), vec![]);
        c.section = SideSection::Rr(RrResult {
            poll: "block".into(),
            messages: 300,
            sent: 300,
            unanswered: 0,
            not_sent: 0,
            lost: 0,
            late: 0,
            duplicated: 0,
            foreign: 0,
            latency_ns: None,
            stages: Some(stages(300)),
            socket_options: vec![],
            syscalls: None,
            marks: None,
            oneway: None,
        });
        c
    }

    /// Stages of `split` messages (counts only: where they go is the test's question).
    fn stages(split: u64) -> crate::stages::Stages {
        crate::stages::Stages {
            split,
            ..Default::default()
        }
    }

    fn sample(index: u32, messages: u64) -> IntervalSample {
        let mut h = new_histogram();
        h.record(50_000 + u64::from(index)).unwrap();
        IntervalSample {
            index,
            start_s: f64::from(index) * 0.5,
            end_s: f64::from(index + 1) * 0.5,
            cpu_busy_percent: Some(10.0),
            partial: false,
            section: SampleSection::Rr(RrSample {
                messages,
                latency_ns: crate::LatencySummary::of(&h),
                stages: Some(stages(messages)),
                oneway: None,
            }),
        }
    }

    fn doc(prelude: Option<Prelude>) -> Document {
        let spec = TestSpec::Ping(RrSpec::default());
        let c = client();
        let samples = [sample(0, 100), sample(1, 200)];
        Document::build(Inputs {
            spec: &spec,
            command: "sonde ping x".into(),
            server_command: None,
            server_address: "198.18.0.2:5301".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            software: "test".into(),
            client: &c,
            server: None,
            client_intervals: &samples,
            server_intervals: &[],
            error: None,
            client_agent: None,
            finished_at: None,
            server_labels: Default::default(),
            fleet: None,
            prelude,
        })
    }

    #[test]
    fn intervals_hold_the_clients_rate_and_latency_in_rrs_section_under_flat_keys() {
        let d = doc(None);
        let rates: Vec<_> = d
            .intervals
            .iter()
            .map(|i| i.rr().unwrap().requests_per_second)
            .collect();
        assert_eq!(rates, [Some(200.0), Some(400.0)]);
        let p50 = d.intervals[1]
            .rr()
            .unwrap()
            .latency_ns
            .as_ref()
            .unwrap()
            .p50;
        assert!(p50.abs_diff(50_001) <= 50, "{p50}");
        // The section's keys sit beside the shared ones, as every release wrote them.
        let v = serde_json::to_value(&d).unwrap();
        let i = v["intervals"][1].as_object().unwrap();
        assert_eq!(i["requests_per_second"], 400.0);
        assert!(i.contains_key("latency_ns") && i.contains_key("reverse"));
        assert_eq!(i["client_cpu_busy_percent"], 10.0);
        // The stages of each interval, and of the whole run, are the client's.
        assert_eq!(i["stages"]["split"], 200);
        assert_eq!(v["end"]["stages"]["split"], 300);
        let back: Document = serde_json::from_value(v).unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn the_prelude_is_the_floor_in_rrs_section_or_a_note_on_the_client_why_not() {
        let floor = SelfNoise {
            socket: "unix_stream".into(),
            seconds: 0.1,
            messages: 1,
            latency_ns: doc(None).intervals[0]
                .rr()
                .unwrap()
                .latency_ns
                .clone()
                .unwrap(),
        };
        let with = doc(Some(Prelude::Rr(RrPrelude {
            self_noise: Ok(floor.clone()),
        })));
        assert_eq!(with.end.rr().unwrap().self_noise, Some(floor));
        let why = "the client side ran on 198.18.0.1, not on this host";
        let without = doc(Some(Prelude::Rr(RrPrelude {
            self_noise: Err(why.into()),
        })));
        let rr = without.end.rr().unwrap();
        assert_eq!(rr.self_noise, None);
        assert_eq!(
            rr.client.as_ref().unwrap().counted.notes,
            [format!("tool floor (--self-noise) not measured: {why}")]
        );
        assert_eq!(doc(None).end.rr().unwrap().self_noise, None);
    }
}
