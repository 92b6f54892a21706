//! A continuous fleet scraped by a real Prometheus: three agents in namespaces on a bridge,
//! `sonde fleet --every --metrics` in a fourth, and Debian's `prometheus` beside it
//! scraping twice a second. Prometheus' own HTTP API must answer for the pairs' figures with
//! their source, destination and both agents' labels (the file's and the agents' own, on
//! every family); an
//! agent killed mid-run leaves
//! failed runs, not stale values; SIGTERM ends the fleet.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::bridge::{Bridged, FLEET_PORT};
use common::prometheus::Prometheus;
use common::{need_tools, temp_file};
use serde_json::Value;

const METRICS: &str = "127.0.0.1:19464";
const PROMETHEUS: &str = "127.0.0.1:19090";

/// A triangle of pairs, a stream and two pings each, every 2 s (passes then run back to
/// back). The claims are the series' labels and comings and goings, no figure beyond "a
/// stream moved more than 1 Mbit/s", so the pings are as short as a run can be: 0.2 s
/// without warm-up. (A stream of 0.2 s without warm-up or cool-down showed 0 bit/s in
/// `sonde_throughput_bits_per_second` once, where alone it measures Gbit/s: it keeps 0.5 s.)
fn fleet_file() -> std::path::PathBuf {
    let mut text = format!("name = \"watch\"\nport = {FLEET_PORT}\n");
    text +=
        "topology = \"pairs\"\npairs = [[\"h1\", \"h2\"], [\"h2\", \"h3\"], [\"h3\", \"h1\"]]\n";
    for k in 1..=3 {
        let zone = if k == 1 { "a" } else { "b" };
        text += &format!(
            "[[agent]]\nname = \"h{k}\"\naddress = \"{}\"\nlabels = {{ zone = \"{zone}\" }}\n",
            Bridged::addr(k)
        );
    }
    text += "[[test]]\ntype = \"stream\"\nduration = 0.5\nwarmup = 0.2\n";
    text += "[[test]]\ntype = \"ping\"\nduration = 0.2\nwarmup = 0\n";
    text += "[[test]]\ntype = \"ping\"\nudp = true\nduration = 0.2\nwarmup = 0\n";
    let path = temp_file("watch.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Prometheus in the controller's namespace, scraping the fleet's metrics twice a second.
fn start_prometheus(lab: &Bridged) -> Prometheus {
    let config = format!(
        "global: {{ scrape_interval: 500ms, evaluation_interval: 500ms }}\n\
         scrape_configs:\n  - job_name: sonde\n    static_configs:\n      - targets: ['{METRICS}']\n"
    );
    Prometheus::start(&lab.controller, PROMETHEUS, "prometheus", &config)
}

/// The fleet: a failed assertion leaves no `sonde fleet` running on in a deleted namespace.
use common::serve_proc::fleet_every_2s;

fn label<'a>(series: &'a Value, name: &str) -> &'a str {
    series["metric"][name].as_str().unwrap_or("")
}

/// Each family's every series carries both agents' own `--label node=nK` (announced by
/// the agents, not written in the fleet file) as `source_node` and `destination_node`.
fn assert_agents_labels_on_every_family(prom: &Prometheus, limit: Duration) {
    let families = [
        ("sonde_throughput_bits_per_second", 3),
        ("sonde_rtt_seconds", 6 * 3),
        ("sonde_packet_loss_ratio", 3),
        ("sonde_runs_total", 9),
        ("sonde_limited_by", 3),
        ("sonde_run_timestamp_seconds", 9),
    ];
    for (family, at_least) in families {
        let series = prom.wait_for(family, limit, |r| r.len() >= at_least);
        for s in &series {
            let node = |end: &str| format!("n{}", label(s, end).trim_start_matches('h'));
            assert_eq!(label(s, "source_node"), node("source"), "{family}: {s}");
            assert_eq!(
                label(s, "destination_node"),
                node("destination"),
                "{family}: {s}"
            );
        }
    }
}

#[test]
fn prometheus_scrapes_a_continuous_fleet_and_a_dead_agent_shows_failed_runs() {
    if !need_tools(&["prometheus", "python3"]) {
        return;
    }
    let Some(lab) = Bridged::new(3) else { return };
    // Each agent announces its own label; the file gives each a zone.
    let mut agents: Vec<_> = (1..=3)
        .map(|k| lab.start_agent_with(k, &["--label", &format!("node=n{k}")]))
        .collect();
    let db = temp_file("watch.db");
    let file = fleet_file();
    let mut fleet = fleet_every_2s(lab.controller(&[]), &file, &db, METRICS);
    let prom = start_prometheus(&lab);

    // Every pair's throughput, labelled by its ends and the file's zone labels.
    // How long to wait for each state the passes bring: a limit, not a figure. A wait ends
    // as soon as its state holds (a pass of 9 runs every 2 s, ~8 s here), so a generous
    // limit costs a passing run nothing; 60 s ran out once at load 9 while the passes
    // queued behind other work.
    let limit = Duration::from_secs(180);
    let all = |r: &[Value]| r.len() == 3;
    let tput = prom.wait_for("sonde_throughput_bits_per_second", limit, all);
    for s in &tput {
        let (src, dst) = (label(s, "source"), label(s, "destination"));
        assert!(
            ["h1->h2", "h2->h3", "h3->h1"].contains(&format!("{src}->{dst}").as_str()),
            "{s}"
        );
        assert!(label(s, "test").starts_with("stream "), "{s}");
        assert_eq!(
            label(s, "source_zone"),
            if src == "h1" { "a" } else { "b" },
            "{s}"
        );
        let bps: f64 = s["value"][1].as_str().unwrap().parse().unwrap();
        assert!(bps > 1e6, "{s}");
    }
    // A TCP and a UDP ping per pair.
    let six = |r: &[Value]| r.len() == 6;
    let rtt = prom.wait_for("sonde_rtt_seconds{quantile=\"0.5\"}", limit, six);
    assert!(
        rtt.iter().all(|s| label(s, "test").starts_with("ping ")),
        "{rtt:?}"
    );
    prom.wait_for("sonde_runs_total{status=\"ok\"}", limit, |r| r.len() >= 9);
    assert_agents_labels_on_every_family(&prom, limit);

    // h3 dies: its pairs fail, and their figures leave rather than stay as they were.
    agents[2].kill();
    let failed = "sonde_runs_total{status=\"failed\", source=\"h2\", destination=\"h3\"} > 0";
    prom.wait_for(failed, limit, |r| !r.is_empty());
    let gone = "sonde_throughput_bits_per_second{destination=\"h3\"}";
    prom.wait_for(gone, limit, |r| r.is_empty());
    let alive = prom.query("sonde_throughput_bits_per_second{source=\"h1\"}");
    assert_eq!(alive.len(), 1, "{alive:?}");

    // SIGTERM ends the fleet promptly and cleanly.
    let pid = fleet.0.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let status = common::wait_with_timeout(&mut fleet.0, Duration::from_secs(20))
        .expect("the fleet stops on SIGTERM");
    assert!(status.success(), "{status:?}");
}
