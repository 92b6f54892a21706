//! `ping --stages` between a lab's namespaces, and the figures of its stages.

use serde_json::Value;

use super::{doc_of, run, skip_unless, Agent, Lab};

/// The stages of a round trip, in the order a message meets them.
pub const STAGES: [&str; 7] = [
    "client_send",
    "client_qdisc",
    "outside",
    "server_wake",
    "server_turnaround",
    "server_send",
    "client_wake",
];

/// The ping document of a 1 s run with stages and `extra` flags.
pub fn staged(lab: &Lab, agent: &Agent, extra: &[&str]) -> Value {
    staged_for(lab, agent, "1", extra)
}

/// The ping document of a run of `secs` with stages, pinned: client on CPU 0, echo on
/// CPU 1, so that a cause planted on one CPU meets one end only.
pub fn staged_for(lab: &Lab, agent: &Agent, secs: &str, extra: &[&str]) -> Value {
    staged_run(lab, agent, "ping", secs, extra)
}

/// The document of `test` (ping, rpc) with stages for a second, pinned as [`staged`].
pub fn staged_test(lab: &Lab, agent: &Agent, test: &str, extra: &[&str]) -> Value {
    staged_run(lab, agent, test, "1", extra)
}

fn staged_run(lab: &Lab, agent: &Agent, test: &str, secs: &str, extra: &[&str]) -> Value {
    // Sampled, the default, unless `extra` says which.
    let which: &[&str] = match extra.contains(&"--stages") {
        true => &[],
        false => &["--stages"],
    };
    let mut args = which.to_vec();
    args.extend_from_slice(&[
        "-t",
        secs,
        "--warmup",
        "0.3",
        "-i",
        "0.5",
        "--cpus",
        "0",
        "--server-cpus",
        "1",
        "--json",
    ]);
    args.extend_from_slice(extra);
    doc_of(&run(lab.sonde(agent, test, &args)))
}

/// A stage's figure `q` (`mean`, `p50`, `p99`) in nanoseconds.
pub fn stage(doc: &Value, name: &str, q: &str) -> f64 {
    doc["end"]["stages"]["ns"][name][q]
        .as_f64()
        .unwrap_or_else(|| {
            panic!(
                "no stage {name} {q}: {} {}",
                doc["end"]["stages"], doc["end"]
            )
        })
}

/// Every stage's P50 and P99 of `doc`, in microseconds, for a failure's message or the log.
pub fn show(doc: &Value) -> String {
    STAGES
        .iter()
        .map(|n| {
            let us = |q| stage(doc, n, q) / 1e3;
            format!("{n} {:.1}/{:.1}", us("p50"), us("p99"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether this machine has the two CPUs that keep client and echo apart; skips otherwise
/// (a failure with CI=true).
pub fn two_cpus() -> bool {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    skip_unless("2 CPUs", (n < 2).then(|| format!("{n} CPU")))
}

/// The median of runs' figures (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
