//! `sonde stream --iperf3` behind a 4 ms delay line (a user-space line on a TUN device in
//! the router namespace, 2 ms each way) and a 50 Mbit/s shaper after it, against a real
//! `iperf3 -s`, alternated with `sonde stream` against our own agent on the same path:
//! the verdict names what limited the run as it does for our agent (the network: the
//! queue the shaper builds shows as RTT over the path's minimum in our sender's
//! TCP_INFO), and the two far ends' throughputs agree (medians of alternating runs).
use crate::common;

use std::process::{Child, Stdio};
use std::time::Duration;

use common::delay_line::DelayLine;
use common::stages::median;
use common::*;
use serde_json::Value;

/// Rounds of one run each way, alternated (the order too).
const ROUNDS: usize = 3;
/// Rounds in which the iperf3 run's verdict and its first evidence (figure, who measured
/// it) must equal our agent's run's of the same round, judged on what an iperf3 far end
/// reports (no CPU of its host: our agent's pinned receiver core, kept 96 % busy by other
/// work, 76 % user time not its own, made its receiver the verdict in 3 of 3 rounds of
/// one run): a majority, as the two runs' senders share this host's CPUs with other work
/// a second apart, and one round may differ.
const AGREE_ROUNDS: usize = ROUNDS / 2 + 1;
/// One-sided margin between the two medians: the same shaper limits both, so they part
/// only by what each far end counts (a second of one run's bytes, 2 % of 50 Mbit/s).
const WITHIN: f64 = 0.03;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn iperf3_server(lab: &Lab) -> Child {
    let child = Lab::in_ns(&lab.server, "iperf3")
        .args(["-s", "-B", lab.server_addr, "-p", "5201"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let up = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        let o = Lab::in_ns(&lab.server, "ss")
            .args(["-Hltn", "sport = :5201"])
            .output();
        o.is_ok_and(|o| !o.stdout.is_empty())
    });
    assert!(up, "iperf3 -s did not listen");
    child
}

/// The verdict (or its runner-up) naming the network, with its decisive figure and who
/// measured it; the verdict itself with its own first figure and who measured it; our
/// sender's bits a second and the far end's own.
fn judged(doc: &Value) -> (Option<(String, String)>, Judged, f64, f64) {
    let lb = &doc["end"]["limited_by"];
    let s = |v: &Value| v.as_str().unwrap_or("none").to_string();
    let first = |v: &Value| {
        (
            s(&v["evidence"][0]["figure"]),
            s(&v["evidence"][0]["measured_by"]),
        )
    };
    let network = [lb, &lb["runner_up"]]
        .into_iter()
        .find(|v| v["verdict"] == "network")
        .map(first);
    let (figure, by) = first(lb);
    (
        network,
        (s(&lb["verdict"]), figure, by),
        f(&doc["end"]["sender"]["bits_per_second"]),
        f(&doc["end"]["receiver"]["bits_per_second"]),
    )
}

/// A verdict, its first evidence's figure and who measured it.
type Judged = (String, String, String);

/// Our agent's run `doc` judged on the figures an iperf3 far end reports: without its
/// host's CPUs (the receiver's, and both ends' shared host's).
fn as_iperf3_far_end(doc: &Value) -> Judged {
    let mut d = doc.clone();
    d["end"]["receiver"]["cpu"] = serde_json::json!({});
    d["end"].as_object_mut().unwrap().remove("one_host");
    let d: sonde_results::Document = serde_json::from_value(d).unwrap();
    let v = sonde_results::limit::judge(&d).expect("a verdict");
    let lb = serde_json::to_value(&v).unwrap();
    let s = |v: &Value| v.as_str().unwrap_or("none").to_string();
    let e = &lb["evidence"][0];
    (s(&lb["verdict"]), s(&e["figure"]), s(&e["measured_by"]))
}

#[test]
fn iperf3_stream_behind_a_delay_line_is_judged_as_against_our_agent() {
    let Some(lab) = Lab::routed(&["iperf3", "tc", "ss"]) else {
        return;
    };
    let line = DelayLine::through_router(&lab, "i3dl");
    if !skip_unless("/dev/net/tun", line.as_ref().err().cloned()) {
        return;
    }
    let line = line.unwrap();
    line.set_hold(Duration::from_millis(2));
    lab.router_tbf("50mbit", "64kb", "160kb");
    let mut iperf3 = iperf3_server(&lab);
    let agent = lab.start_agent();
    // iperf3 counts its warm-up (--omit) in whole seconds: 1 is the least.
    let args = ["-P", "1", "-t", "2", "--warmup", "1", "--json", "--no-save"];
    let (mut theirs, mut ours, mut rounds) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let via_iperf3 = || {
            doc_of(&run({
                let mut c = Lab::in_ns(&lab.client, SONDE);
                c.args(["stream", lab.server_addr, "--iperf3"]).args(args);
                c
            }))
        };
        let via_agent = || doc_of(&run(lab.stream(&agent, &args)));
        let (via_iperf3, via_agent) = if round % 2 == 0 {
            (via_iperf3(), via_agent())
        } else {
            let a = via_agent();
            (via_iperf3(), a)
        };
        let mut judged_round = Vec::new();
        for (who, doc, into) in [
            ("iperf3 -s", &via_iperf3, &mut theirs),
            ("our agent", &via_agent, &mut ours),
        ] {
            let (network, verdict, sent, far) = judged(doc);
            eprintln!(
                "round {round} {who}: {verdict:?} (network: {network:?}); sent {:.2} Mbit/s, the far end's own {:.2}",
                sent / 1e6,
                far / 1e6
            );
            assert_eq!(doc["end"]["partial"], false, "{who}: {}", doc["end"]);
            into.push(far);
            judged_round.push(verdict);
            if who == "our agent" {
                continue;
            }
            // The network, seen in our sender's own TCP_INFO (the RTT the shaper's queue
            // adds over the line's 4 ms), as the verdict or its runner-up, in every run.
            assert_eq!(
                network,
                Some(("tcp_info.srtt_us".into(), "client".into())),
                "{who}: {}",
                doc["end"]["limited_by"]
            );
        }
        assert!(via_iperf3["end"]["receiver"]["host"]
            .as_str()
            .unwrap()
            .starts_with("iperf3 server"));
        let alike = as_iperf3_far_end(&via_agent);
        eprintln!("round {round} our agent on an iperf3 far end's figures: {alike:?}");
        rounds.push((judged_round[0].clone(), alike));
    }
    let held = line.stop();
    let (t, o) = (median(theirs), median(ours));
    eprintln!(
        "medians: iperf3 -s received {:.2} Mbit/s, our agent {:.2} Mbit/s (ratio {:.3}); the line held {} packets",
        t / 1e6,
        o / 1e6,
        t / o,
        held.len()
    );
    eprintln!("verdicts (iperf3 -s, our agent on its figures) by round: {rounds:?}");
    // As for our agent: the same verdict on the same evidence in a majority of rounds,
    // and that verdict the network's, on the sender's smoothed RTT (the shaper is the
    // bottleneck: 50 Mbit/s is a few percent of one core).
    let network: Judged = ("network".into(), "tcp_info.srtt_us".into(), "client".into());
    let agreed = rounds.iter().filter(|(i, a)| i == a).count();
    let as_network = rounds.iter().filter(|(i, _)| *i == network).count();
    assert!(
        agreed >= AGREE_ROUNDS,
        "{agreed} of {ROUNDS} alike: {rounds:?}"
    );
    assert!(
        as_network >= AGREE_ROUNDS,
        "{as_network} network: {rounds:?}"
    );
    assert!((t / o - 1.0).abs() < WITHIN, "iperf3 {t} vs agent {o}");
    let _ = iperf3.kill();
    let _ = iperf3.wait();
}
