//! `sonde ping` and `sonde rpc` across two namespaces: figures present and consistent,
//! request counts equal to nftables' count of the same packets, an injected stall measured
//! as its known length, open loop against closed loop.

use crate::common;

use common::*;

fn lat(doc: &serde_json::Value, q: &str) -> f64 {
    doc["end"]["latency_ns"][q]
        .as_f64()
        .unwrap_or_else(|| panic!("no latency {q}: {}", doc["end"]))
}

#[test]
fn ping_tcp_and_udp_report_round_trip_times() {
    let Some(lab) = Lab::new() else { return };
    let agent = lab.start_agent();
    for extra in [&[][..], &["--udp"][..]] {
        let mut args = vec!["-t", "1", "--warmup", "0.3", "-i", "0.5", "--json"];
        args.extend_from_slice(extra);
        let doc = doc_of(&run(lab.sonde(&agent, "ping", &args)));
        let end = &doc["end"];
        assert_eq!(doc["test"], "ping");
        assert_eq!(end["partial"], false);
        assert_eq!(end["latency_is"], "round_trip_time");
        let count = end["latency_ns"]["count"].as_u64().unwrap();
        assert!(count > 100, "{extra:?}: {count} round trips");
        assert!(
            lat(&doc, "min") > 0.0
                && lat(&doc, "p50") >= lat(&doc, "min")
                && lat(&doc, "max") >= lat(&doc, "p999")
        );
        assert_eq!(end["client"]["messages"].as_u64().unwrap(), count);
        // The agent answered what the client received, give or take the window's edges.
        let served = end["server"]["messages"].as_f64().unwrap();
        assert!(
            (served - count as f64).abs() / (count as f64) < 0.05,
            "{extra:?}: {served} vs {count}"
        );
        for side in ["client", "server"] {
            assert!(
                end[side]["cpu_us_per_message"].as_f64().unwrap() > 0.0,
                "{side}"
            );
            // One request in flight on blocking sockets: a send and a receive at least
            // (UDP's echo: recvfrom and sendto), a few more around waits at most.
            let calls = end[side]["syscalls_per_message"].as_f64().unwrap();
            assert!((1.9..4.0).contains(&calls), "{extra:?} {side}: {calls}");
        }
        assert_eq!(doc["intervals"].as_array().unwrap().len(), 2);
        assert!(doc["intervals"][0]["latency_ns"]["p99"].as_u64().unwrap() > 0);
        assert_eq!(end["unanswered_requests"], 0);
        assert!(end.get("self_noise").is_none(), "not asked for: {end}");
    }
}

/// The tool's own work during the window is counted on each side, and the control thread
/// leaves the CPUs of pinned workers when another CPU remains, and says when none does.
#[test]
fn control_thread_is_counted_and_kept_off_pinned_workers() {
    let Some(lab) = Lab::new() else { return };
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("SKIPPED: needs 2 CPUs");
        return;
    }
    let agent = lab.start_agent();
    let args = [
        "-t",
        "1",
        "--warmup",
        "0.2",
        "-i",
        "0.1",
        "--cpus",
        "0",
        "--server-cpus",
        "0",
    ];
    let out = run(lab.sonde(&agent, "ping", &args));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("client: control thread in the window: "),
        "{text}"
    );
    let doc = doc_of(&run(lab.sonde(
        &agent,
        "ping",
        &[&args[..], &["--json"]].concat(),
    )));
    for side in ["client", "server"] {
        let c = &doc["end"][side]["control_thread"];
        assert_eq!(c["apart"], true, "{side}: {c}");
        let cpus: Vec<u64> = c["cpus"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_u64())
            .collect();
        assert!(!cpus.is_empty() && !cpus.contains(&0), "{side}: {c}");
        // Ten intervals: the control thread slept and woke for each of them, or, beside
        // other work, found its next deadline passed and was preempted instead (wakeups 1,
        // preempted 29 at load 11): it was switched out at least 5 times either way.
        let switched = c["wakeups"].as_u64().unwrap() + c["preempted"].as_u64().unwrap();
        assert!(switched >= 5, "{side}: {c}");
        assert!(c["cpu_ms"].as_f64().unwrap() > 0.0, "{side}: {c}");
    }
    // Workers on every CPU: nowhere else to go, and the document says so.
    let every = [
        &SHORT_RPC[..],
        &["--threads", "2", "--cpus", "0,1", "--json"],
    ]
    .concat();
    let doc = doc_of(&run(lab.sonde(&agent, "rpc", &every)));
    let c = &doc["end"]["client"]["control_thread"];
    assert_eq!(c["apart"], false, "{c}");
}

/// `--self-noise`: the tool's floor over a Unix socket pair of the test's kind, stored
/// beside the result and printed on one line under the summary.
#[test]
fn ping_stores_and_prints_the_tools_floor() {
    let Some(lab) = Lab::new() else { return };
    let agent = lab.start_agent();
    let timing = ["-t", "0.5", "--warmup", "0.2", "--self-noise=0.3"];
    for (udp, socket) in [(false, "unix_stream"), (true, "unix_seqpacket")] {
        let mut args = timing.to_vec();
        args.push("--json");
        if udp {
            args.push("--udp");
        }
        let doc = doc_of(&run(lab.sonde(&agent, "ping", &args)));
        assert_eq!(doc["start"]["spec"]["self_noise_ms"], 300);
        let floor = &doc["end"]["self_noise"];
        assert_eq!(floor["socket"], socket, "{floor}");
        assert_eq!(floor["seconds"], 0.3);
        let messages = floor["messages"].as_u64().unwrap();
        // Round trips one after another in 0.3 s: some, and no more than their shortest
        // fits into the window (how many depends on the machine's load: 576 to thousands).
        let l = &floor["latency_ns"];
        let q = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("{k}: {l}"));
        assert!(messages > 0, "{socket}: no round trips");
        assert!(
            q("min") * messages <= 300_000_000,
            "{socket}: {messages} in 0.3 s: {l}"
        );
        assert_eq!(q("count"), messages);
        assert!(
            q("min") > 0 && q("p50") <= q("p999") && q("p999") <= q("max"),
            "{l}"
        );
    }
    let o = run(lab.sonde(&agent, "ping", &timing));
    let text = stdout(&o);
    assert!(o.status.success(), "{text}{}", stderr(&o));
    let line = text
        .lines()
        .find(|l| {
            l.starts_with(
                "tool floor (in-process echo over a Unix stream socket, no network): P50 ",
            )
        })
        .unwrap_or_else(|| panic!("no floor line: {text}"));
    assert!(
        line.contains(" us, P99.9 ") && line.ends_with(" messages)"),
        "{line}"
    );
}

#[test]
fn self_noise_with_a_bypass_engine_is_refused_naming_both_flags() {
    let o = run({
        let mut c = sonde_cmd();
        c.args([
            "ping",
            SERVER_ADDR,
            "--self-noise",
            "--engine",
            "xdp",
            "-t",
            "1",
        ]);
        c
    });
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--self-noise") && err.contains("--engine xdp"),
        "{err}"
    );
}

#[test]
fn rpc_requests_match_nftables_count_of_request_segments() {
    requests_match_nftables_count("kernel");
}

#[test]
fn rpc_on_io_uring_requests_match_nftables_count_of_request_segments() {
    requests_match_nftables_count("uring");
}

fn requests_match_nftables_count(engine: &str) {
    let Some(lab) = Lab::needing(&["nft"]) else {
        return;
    };
    let agent = lab.start_agent();
    // Requests of 100 bytes over TCP with TCP_NODELAY and one in flight per connection:
    // one segment each (IP length 152). nftables counts segments to the agent longer than
    // SYNs (60), headers (64) and bare ACKs (52), other than the control connection's.
    lab.server_data_rule(&agent, &["counter"]);
    let doc = doc_of(&run(lab.sonde(
        &agent,
        "rpc",
        &[
            "-C",
            "4",
            "-W",
            "1",
            "--req-size",
            "100",
            "--resp-size",
            "200",
            "-t",
            "1",
            "--warmup",
            "0.3",
            "--engine",
            engine,
            "--json",
        ],
    )));
    let counted = lab.server_nft_count();
    let end = &doc["end"];
    let sent = end["client"]["messages"].as_u64().unwrap();
    assert!(sent > 1000);
    // The document's total of requests sent over the whole test is in the client's result.
    let sent_total = doc_total_sent(&doc);
    assert_eq!(
        counted, sent_total,
        "{engine}: nftables counted {counted} request segments, sonde sent {sent_total}"
    );
    for side in ["client", "server"] {
        assert_eq!(end[side]["engine"], engine, "{side}: {}", end[side]);
    }
    assert_eq!(end["unanswered_requests"], 0);
}

/// Requests sent over the whole test: answered in or out of the window, or unanswered.
fn doc_total_sent(doc: &serde_json::Value) -> u64 {
    doc["end"]["client"]["requests_sent"]
        .as_u64()
        .expect("requests_sent")
}

#[test]
fn open_loop_tail_shows_an_injected_stall_of_known_length() {
    let Some(lab) = Lab::new() else { return };
    // The stall is a test hook: an agent honours it only when told to.
    let agent = lab.start_agent_with(&["--test-hooks"]);
    let stall_ms = 100.0;
    let common = [
        "-C",
        "1",
        "-t",
        "2",
        "--warmup",
        "0.3",
        "--server-stall",
        "1000:100",
        "--json",
    ];
    let mut open = common.to_vec();
    open.extend(["-W", "256", "--rate", "2000"]);
    // The closed loop with one request in flight: the stall holds exactly one answer. (With
    // 256 in flight it held 256, and beside other work, when the closed loop made fewer
    // round trips, those were over 1 % of them: its P99 was 43 ms, half the open loop's.)
    let mut closed = common.to_vec();
    closed.extend(["-W", "1"]);
    let open_doc = doc_of(&run(lab.sonde(&agent, "rpc", &open)));
    let closed_doc = doc_of(&run(lab.sonde(&agent, "rpc", &closed)));
    assert_eq!(
        open_doc["end"]["latency_is"],
        "round_trip_time_from_intended_send"
    );
    // The stall is the longest wait; the machine's other work may add to it, never take
    // from it, so the bound above is loose (2.5x).
    for d in [&open_doc, &closed_doc] {
        let max_ms = lat(d, "max") / 1e6;
        assert!(
            max_ms >= stall_ms * 0.95 && max_ms < stall_ms * 2.5,
            "max {max_ms} ms for a {stall_ms} ms stall"
        );
    }
    // Answers that waited half the stall or more, counted, not timed: the open loop's
    // requests due in the stall's first half (100 at 2000/s, from their intended sends: a
    // sender beside other work only adds to them), against the closed loop's one held
    // answer and the rare round trip the machine's other work held that long.
    let over_half_stall = |d: &serde_json::Value| {
        let text = d["end"]["latency_ns"]["histogram"].as_str().unwrap();
        let h = sonde_results::latency::decode(text).unwrap();
        let from = (stall_ms / 2.0 * 1e6) as u64;
        h.count_between(from, h.max())
    };
    let (open_n, closed_n) = (over_half_stall(&open_doc), over_half_stall(&closed_doc));
    eprintln!("answers waiting 50 ms or more: open loop {open_n}, closed loop {closed_n}");
    assert!(
        open_n >= 50,
        "open loop: {open_n} answers waited 50 ms or more"
    );
    assert!(
        (1..=10).contains(&closed_n),
        "closed loop: {closed_n} answers waited 50 ms or more"
    );
    // Open loop: ~200 requests were due during the stall, 5 % of 4000: P99 carries it.
    let open_p99_ms = lat(&open_doc, "p99") / 1e6;
    assert!(open_p99_ms > 30.0, "open-loop P99 {open_p99_ms} ms");
}

#[test]
fn crr_and_receive_modes() {
    let Some(lab) = Lab::new() else { return };
    let agent = lab.start_agent();
    let doc = doc_of(&run(lab.sonde(
        &agent,
        "rpc",
        &["--crr", "-C", "2", "-t", "1", "--warmup", "0.2", "--json"],
    )));
    assert!(doc["end"]["latency_ns"]["count"].as_u64().unwrap() > 50);
    let o = run(lab.sonde(
        &agent,
        "ping",
        &["--poll", "all", "-t", "0.5", "--warmup", "0.2", "--json"],
    ));
    let docs = doc_of(&o);
    let docs = docs.as_array().expect("an array of one document per mode");
    let modes: Vec<&str> = docs
        .iter()
        .map(|d| d["end"]["client"]["poll"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["block", "busy", "hybrid=50us"]);
    for d in docs {
        assert!(d["end"]["client"]["cpu_us_per_message"].as_f64().unwrap() > 0.0);
    }
    // Human output ends with the comparison table.
    let o = run(lab.sonde(
        &agent,
        "ping",
        &["--poll", "all", "-t", "0.3", "--warmup", "0.1"],
    ));
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("== receive modes compared =="));
}
