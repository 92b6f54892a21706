//! `end.limited_by` on real bottlenecks planted in namespaces: a shaper on the sender's
//! egress and in a router it cannot see, small socket buffers, nftables dropping segments,
//! a CPU hog on the receiver's worker core, the test's own `--rate`, a pps receiver that
//! overflows, a pps sender behind a shaper on its own egress, and with --reverse the
//! receiver's CPU and the agent's egress. Each test checks the verdict and that its
//! evidence names the decisive figure with its side and unit. Magnitudes sit far from the
//! rules' thresholds: the rules follow the evidence bench/limit_evidence.py collects, these
//! tests check they hold. Also: TCP_INFO on both ends in every interval, forward, reverse
//! and bidir.

use crate::common;

use std::process::Child;

use common::*;
use serde_json::Value;

/// The client's workers on CPU 0, the agent's on CPU 1: a hog then knows where to go.
const PINNED: [&str; 4] = ["--cpus", "0", "--server-cpus", "1"];

/// A lab whose two ends can be pinned apart, or `None` (skip) on a one-CPU machine.
fn pinned_lab(lab: Option<Lab>) -> Option<Lab> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let lab = lab?;
    skip_unless(
        "two CPUs (the ends pinned apart)",
        (cpus < 2).then(|| format!("{cpus} CPU")),
    )
    .then_some(lab)
}

/// `sonde TEST ... --json` with the ends pinned apart; the document. Each verdict reads
/// ratios (busy, limited or lost per second or per packet), not totals, so 2 s measured
/// judge as 3 s did; half a second of warm-up is past TCP's slow start on a veth.
fn judged_run(lab: &Lab, agent: &Agent, test: &str, args: &[&str]) -> Value {
    let mut all = vec!["-t", "2", "--warmup", "0.5", "--json", "--no-save"];
    all.extend_from_slice(&PINNED);
    all.extend_from_slice(args);
    doc_of(&run(lab.sonde(agent, test, &all)))
}

/// The verdict of a document, with what a failed assertion shows: the whole verdict and
/// the sender's figures the stream rules read.
fn verdict(doc: &Value) -> (&str, String) {
    let lb = &doc["end"]["limited_by"];
    let snd = &doc["end"]["sender"];
    let why = format!(
        "limited_by {lb}\nsender tcp_info {}\nretransmits {}\nreceiver {} bit/s",
        snd["tcp_info"], snd["tcp_retransmits"], doc["end"]["receiver"]["bits_per_second"]
    );
    (lb["verdict"].as_str().unwrap_or("none"), why)
}

/// Where a figure of the evidence stands: the end it describes, and who measured it
/// (`None`: a figure of the spec).
type At = (&'static str, Option<&'static str>);
const CLIENT_SENDER: At = ("sender", Some("client"));
const CLIENT_RECEIVER: At = ("receiver", Some("client"));
const SERVER_SENDER: At = ("sender", Some("server"));
const SERVER_RECEIVER: At = ("receiver", Some("server"));
const THE_SPEC: At = ("test", None);

/// Asserts the verdict is `want` and that its decisive (first) evidence is `figure`,
/// describing `end`, measured by `by` (`None`: a figure of the spec), in `unit`, with a
/// positive value. A document judged wrongly is also written to
/// $SONDE_TEST_KEEP_DOCS/test-<want>.json when that directory is set, for whoever writes
/// the rules.
fn assert_judged(doc: &Value, want: &str, figure: &str, (end, by): At, unit: &str) {
    let (got, why) = verdict(doc);
    if let (true, Some(dir)) = (got != want, std::env::var_os("SONDE_TEST_KEEP_DOCS")) {
        let path = std::path::Path::new(&dir).join(format!("test-{want}.json"));
        std::fs::write(&path, doc.to_string()).unwrap();
        eprintln!("wrong verdict: the document is in {}", path.display());
    }
    assert_eq!(got, want, "{why}");
    let lb = &doc["end"]["limited_by"];
    assert_eq!(
        lb["evidence"][0]["figure"], figure,
        "the decisive figure: {lb}"
    );
    assert_evidence(doc, figure, (end, by), unit);
}

/// Asserts the verdict's evidence holds `figure` for `end`, measured by `by`, in `unit`,
/// with a positive value and a sentence.
fn assert_evidence(doc: &Value, figure: &str, (end, by): At, unit: &str) {
    let lb = &doc["end"]["limited_by"];
    let ev = lb["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["figure"] == figure)
        .unwrap_or_else(|| panic!("no {figure} in the evidence: {lb}"));
    assert_eq!(ev["end"], end, "{ev}");
    assert_eq!(ev["measured_by"].as_str(), by, "{ev}");
    assert_eq!(ev["unit"], unit, "{ev}");
    assert!(ev["value"].as_f64().unwrap() > 0.0, "{ev} in {lb}");
    assert!(!ev["text"].as_str().unwrap().is_empty(), "{ev}");
    eprintln!("{}: {}", lb["verdict"], ev["text"]);
}

/// The first evidence figure: the one that decided the verdict.
fn decisive(doc: &Value) -> &Value {
    &doc["end"]["limited_by"]["evidence"][0]
}

/// A tbf shaper of `rate` in namespace `ns` on `dev`: a realistic burst, 20 ms of queue.
fn tbf(ns: &str, dev: &str, rate: &str) {
    let out = run({
        let mut c = Lab::in_ns(ns, "tc");
        c.args(["qdisc", "add", "dev", dev, "root", "tbf", "rate", rate])
            .args(["burst", "256kb", "latency", "20ms"]);
        c
    });
    assert!(out.status.success(), "tc: {}", stderr(&out));
}

/// Shaped on the sender's own egress, TCP Small Queues keeps the queue short but the
/// shaper's 20 ms still shows as RTT over the path's minimum.
#[test]
fn tbf_on_the_senders_egress_is_the_network() {
    let Some(lab) = pinned_lab(Lab::needing(&["tc"])) else {
        return;
    };
    tbf(&lab.client, &lab.client_if, "100mbit");
    let agent = lab.start_agent();
    let doc = judged_run(&lab, &agent, "stream", &["-P", "1"]);
    assert_judged(&doc, "network", "tcp_info.srtt_us", CLIENT_SENDER, "us");
}

/// Shaped in a router: the sender cannot see the qdisc, only the queue it builds.
#[test]
fn tbf_in_a_router_is_the_network() {
    let Some(lab) = pinned_lab(Lab::routed(&["tc"])) else {
        return;
    };
    let (router, toward_agent) = lab.router.clone().unwrap();
    tbf(&router, &toward_agent, "100mbit");
    let agent = lab.start_agent();
    let doc = judged_run(&lab, &agent, "stream", &["-P", "1"]);
    assert_judged(&doc, "network", "tcp_info.srtt_us", CLIENT_SENDER, "us");
}

/// A 4 KiB receive buffer: a window of a few segments, a twentieth of the veth's rate.
#[test]
fn a_small_rcvbuf_is_the_receiver_window() {
    let Some(lab) = pinned_lab(Lab::new()) else {
        return;
    };
    let agent = lab.start_agent();
    let doc = judged_run(&lab, &agent, "stream", &["-P", "1", "--rcvbuf", "4K"]);
    let figure = "tcp_info.snd_wnd_bytes";
    assert_judged(&doc, "receiver_window", figure, CLIENT_SENDER, "bytes");
    let rwnd = "tcp_info.rwnd_limited_percent";
    assert_evidence(&doc, rwnd, CLIENT_SENDER, "%");
}

/// A 4 KiB send buffer: the sender waits for space after every few segments. On veth the
/// kernel's sndbuf-limited chronograph stays at 0 (it starts only when an ACK-driven send
/// empties the write queue while the application waits for space, and here every send
/// goes out at once), so the buffer set below a connection's bandwidth-delay product decides.
#[test]
fn a_small_sndbuf_is_the_sender_buffer() {
    let Some(lab) = pinned_lab(Lab::new()) else {
        return;
    };
    let agent = lab.start_agent();
    let doc = judged_run(&lab, &agent, "stream", &["-P", "1", "--sndbuf", "4K"]);
    let figure = "spec.sndbuf_bytes";
    assert_judged(&doc, "sender_buffer", figure, CLIENT_SENDER, "bytes");
    assert_eq!(decisive(&doc)["value"], 4096.0, "{}", decisive(&doc));
}

/// nftables on the agent drops 3 % of the data segments (never the control port's, nor
/// bare ACKs and handshakes): the sender's retransmissions name the loss.
#[test]
fn nftables_drops_are_the_network() {
    let Some(lab) = pinned_lab(Lab::needing(&["nft"])) else {
        return;
    };
    let agent = lab.start_agent();
    let share = [
        "numgen", "random", "mod", "1000", "<", "30", "counter", "drop",
    ];
    lab.server_data_rule(&agent, &share);
    let doc = judged_run(&lab, &agent, "stream", &["-P", "1"]);
    assert!(lab.server_nft_count() > 100, "the rule dropped too little");
    let figure = "tcp_retransmits.connections";
    assert_judged(&doc, "network", figure, CLIENT_SENDER, "segments");
}

/// Busy loops on one CPU of the server namespace, each bounded by `timeout` and ended
/// (SIGTERM, which `timeout` passes on to its loop) when dropped.
struct Hogs(Vec<Child>);

impl Hogs {
    fn on(ns: &str, cpu: &str, n: usize) -> Hogs {
        Hogs::niced(ns, cpu, n, 0)
    }

    /// As [`Hogs::on`], at nice `nice`: 19 takes only what the core's other threads leave.
    fn niced(ns: &str, cpu: &str, n: usize, nice: i32) -> Hogs {
        let hogs = (0..n)
            .map(|_| {
                let mut c = Lab::in_ns(ns, "nice");
                c.args(["-n", &nice.to_string(), "taskset"]).args([
                    "-c",
                    cpu,
                    "timeout",
                    "20",
                    "sh",
                    "-c",
                    "while :; do :; done",
                ]);
                c.spawn_keeping(Keep::Nothing)
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(300));
        Hogs(hogs)
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for h in &mut self.0 {
            // SAFETY: a plain signal to a child of ours that has not been waited for.
            unsafe { libc::kill(h.id() as libc::pid_t, libc::SIGTERM) };
            let _ = h.wait();
        }
    }
}

/// Two busy loops share the receiver's pinned core with it: it gets a third of the core.
#[test]
fn a_cpu_hog_on_the_receivers_core_is_the_receiver_cpu() {
    let Some(lab) = pinned_lab(Lab::needing(&["taskset", "timeout"])) else {
        return;
    };
    let doc = receiver_hogged(&lab, &lab.server, "1", &["-P", "1"], SERVER_RECEIVER);
    assert!(
        decisive(&doc)["value"].as_f64().unwrap() > 90.0,
        "{}",
        decisive(&doc)
    );
}

/// With --reverse the client receives: two busy loops on the client's pinned core make
/// the receiver's CPU the limit again, now measured by the client.
#[test]
fn a_cpu_hog_on_the_receivers_core_in_reverse_is_the_receiver_cpu() {
    let Some(lab) = pinned_lab(Lab::needing(&["taskset", "timeout"])) else {
        return;
    };
    let reverse = ["-P", "1", "--reverse"];
    receiver_hogged(&lab, &lab.client, "0", &reverse, CLIENT_RECEIVER);
}

/// A stream run with `args` whose receiver shares its pinned core (`cpu` of namespace
/// `ns`) with two busy loops: judged the receiver's CPU, as `at` measured it.
fn receiver_hogged(lab: &Lab, ns: &str, cpu: &str, args: &[&str], at: At) -> Value {
    let agent = lab.start_agent();
    let doc = {
        let _hogs = Hogs::on(ns, cpu, 2);
        judged_run(lab, &agent, "stream", args)
    };
    let figure = "cpu.worker_cpus.busy_percent";
    assert_judged(&doc, "receiver_cpu", figure, at, "%");
    let (on, waited) = receiver_workers(&doc);
    assert!(
        waited >= 10.0,
        "starved: ran {on:.1} %, waited {waited:.1} %"
    );
    doc
}

/// The receiver's workers' summed share of the window on CPU and waiting to run, percent.
fn receiver_workers(doc: &Value) -> (f64, f64) {
    let workers = doc["end"]["receiver"]["cpu"]["workers"].as_array();
    let workers = workers.unwrap_or_else(|| panic!("no cpu.workers: {}", doc["end"]["receiver"]));
    let sum = |k: &str| workers.iter().map(|w| w[k].as_f64().unwrap()).sum::<f64>();
    let (on, waited) = (sum("on_cpu_percent"), sum("waited_percent"));
    eprintln!("receiver's workers: on CPU {on:.2} %, waited {waited:.2} %");
    (on, waited)
}

/// A busy loop shares the receiver's pinned core while a 100 Mbit/s shaper on the
/// client's egress limits the run: the core reads fully busy, but the receiver's worker
/// sleeps most of the window and runs as soon as data arrive. At nice 19 (a background
/// job), at nice 0 (a compiler beside the test), and with a nice 0 loop on the sender's
/// core too (both ends' CPUs, the whole host, busy) the limit is the network's.
#[test]
fn a_busy_core_the_receiver_keeps_up_on_is_the_network() {
    let Some(lab) = pinned_lab(Lab::needing(&["tc", "nice", "taskset", "timeout"])) else {
        return;
    };
    tbf(&lab.client, &lab.client_if, "100mbit");
    let agent = lab.start_agent();
    for (nice, both) in [(19, false), (0, false), (0, true)] {
        let doc = {
            let _hog = Hogs::niced(&lab.server, "1", 1, nice);
            let _other = both.then(|| Hogs::niced(&lab.client, "0", 1, nice));
            judged_run(&lab, &agent, "stream", &["-P", "1"])
        };
        let core = &doc["end"]["receiver"]["cpu"]["worker_cpus"][0];
        let busy = 100.0 - core["idle_percent"].as_f64().unwrap();
        eprintln!("nice {nice}, sender's core too {both}: receiver's core busy {busy:.1} %");
        assert!(busy > 90.0, "the hog kept the core busy: {core}");
        let (on, waited) = receiver_workers(&doc);
        assert!(
            on < 50.0 && waited < 10.0,
            "ran {on:.1} %, waited {waited:.1} %"
        );
        assert_judged(&doc, "network", "tcp_info.srtt_us", CLIENT_SENDER, "us");
    }
}

/// With --reverse the agent sends: a shaper on its own egress shows as the queueing
/// delay the agent's TCP_INFO measured.
#[test]
fn tbf_on_the_agents_egress_in_reverse_is_the_network() {
    let Some(lab) = pinned_lab(Lab::needing(&["tc"])) else {
        return;
    };
    tbf(&lab.server, &lab.server_if, "100mbit");
    let agent = lab.start_agent();
    let doc = judged_run(&lab, &agent, "stream", &["-P", "1", "--reverse"]);
    let srtt = "tcp_info.srtt_us";
    assert_judged(&doc, "network", srtt, SERVER_SENDER, "us");
}

/// 300 Mbit/s on a path that carries 10 Gbit/s and more: the test's own pacing.
#[test]
fn a_rate_below_capacity_is_the_test_rate() {
    let Some(lab) = pinned_lab(Lab::new()) else {
        return;
    };
    let agent = lab.start_agent();
    let doc = judged_run(&lab, &agent, "stream", &["-P", "1", "--rate", "300M"]);
    assert_judged(&doc, "test_rate", "spec.rate", THE_SPEC, "bit/s");
    assert_evidence(&doc, "rate", SERVER_RECEIVER, "bit/s");
}

/// One receiving thread whose socket buffer stays at net.core.rmem_max: the agent runs
/// without CAP_NET_ADMIN, so it cannot force its usual 8 MiB past it, and a GSO sender
/// (one send per batch) outruns it. The overflow is counted as socket drops. The limit is
/// held at Debian's default (208 KiB) for the test: a host tuned to megabytes buffers
/// most of a 2 s burst, and drops too few to judge.
#[test]
fn a_pps_receiver_with_one_thread_and_a_small_buffer_drops() {
    let Some(lab) = pinned_lab(Lab::needing(&["setpriv"])) else {
        return;
    };
    let _small = Sysctl::hold("/proc/sys/net/core/rmem_max", "212992");
    let mut cmd = Lab::in_ns(&lab.server, "setpriv");
    cmd.args([
        "--bounding-set",
        "-net_admin",
        SONDE,
        "serve",
        "--port",
        "0",
    ])
    .args(["--bind", lab.server_addr]);
    let agent = Agent::start(cmd);
    let doc = judged_run(
        &lab,
        &agent,
        "pps",
        &["--rx-threads", "1", "--tx-threads", "1", "--gso"],
    );
    let drops = doc["end"]["packets"]["socket_drops"].as_u64().unwrap();
    assert!(drops > 0, "no socket drops: {}", doc["end"]["packets"]);
    let figure = "lost_packets";
    assert_judged(&doc, "receiver_drops", figure, SERVER_RECEIVER, "packets");
    let socket = "packets.socket_drops";
    assert_evidence(&doc, socket, SERVER_RECEIVER, "packets");
}

/// A 5 Mbit/s tbf on the sender's own egress, far below what its one thread sends (some
/// 300 kpps unshaped here; the tbf passes 9.8 kpps of 64-byte packets): its socket's
/// buffer fills with packets the tbf has not taken, and its sends wait for room. Judged
/// `network` on those waits (measured: 99 % of the thread's time), with the tbf's
/// overlimits beside them, nothing lost, and the sender's process CPU well below the
/// window (measured 0.06 s in 1.5 s): it waited in poll, it did not spin on the full
/// queue. The margin: a quarter of the window, against the whole window or more that a
/// sender spinning on its sends would use.
#[test]
fn a_pps_sender_behind_a_tbf_on_its_own_egress_is_the_network() {
    let Some(lab) = pinned_lab(Lab::needing(&["tc"])) else {
        return;
    };
    // A queue of 2 MB (32 k packets of 64 bytes) that the socket's buffer fills long
    // before it overflows (each packet is charged its skb's truesize there, hundreds of
    // bytes): the sender is held back and nothing is dropped, unless
    // net.core.wmem_default is tens of megabytes (Debian's: 208 KiB).
    let shaper = [
        "root", "tbf", "rate", "5mbit", "burst", "16kb", "limit", "2mb",
    ];
    let dev = ["qdisc", "add", "dev", lab.client_if.as_str()];
    lab.client_cmd("tc", &[&dev[..], &shaper[..]].concat());
    let agent = lab.start_agent();
    let mut args = vec!["-t", "1.5", "--warmup", "0.5", "--json", "--no-save"];
    args.extend_from_slice(&PINNED);
    args.extend_from_slice(&["--tx-threads", "1"]);
    let doc = doc_of(&run(lab.sonde(&agent, "pps", &args)));
    let blocked = "blocked_sends.seconds";
    assert_judged(&doc, "network", blocked, CLIENT_SENDER, "s");
    let overlimits = "qdisc.overlimits";
    assert_evidence(&doc, overlimits, CLIENT_SENDER, "events");
    let end = &doc["end"];
    assert_eq!(end["lost_packets"], 0, "{}", end["packets"]);
    let snd = &end["sender"];
    assert!(
        snd["blocked_sends"]["would_block"].as_u64().unwrap() > 0,
        "{snd}"
    );
    assert_eq!(snd["qdisc"]["kind"], "tbf", "{snd}");
    let cpu_s = snd["cpu"]["process_cpu_s"].as_f64().unwrap();
    let window_s = snd["seconds"].as_f64().unwrap();
    eprintln!("sender's process CPU {cpu_s:.3} s in {window_s:.2} s");
    assert!(
        cpu_s < window_s / 4.0,
        "the sender used {cpu_s:.2} s of CPU in {window_s:.2} s: it spun on its full queue"
    );
}

/// Every interval of a forward, reverse and bidir run carries TCP_INFO from both ends of
/// each direction, read by the side that owns the socket; a sender's series is never
/// zeros (iperf3's reverse mode reports zeros, esnet/iperf #803), nor a receiver's series
/// of windows. (A receiver's window is a gauge read at the interval's end: a full receive
/// queue advertises 0 at that instant, which a run at full speed sometimes catches.)
#[test]
fn tcp_info_on_both_sides_in_every_interval_of_every_direction() {
    let Some(lab) = pinned_lab(Lab::new()) else {
        return;
    };
    let agent = lab.start_agent();
    for (mode, sender_by) in [
        ("", "client"),
        ("--reverse", "server"),
        ("--bidir", "client"),
    ] {
        let mut args = vec!["-P", "2", "-i", "0.25"];
        args.extend((!mode.is_empty()).then_some(mode));
        let doc = judged_run(&lab, &agent, "stream", &args);
        let intervals = doc["intervals"].as_array().unwrap();
        assert!(
            intervals.len() >= 5,
            "{mode}: {} intervals",
            intervals.len()
        );
        let mut open_windows = [0; 2];
        for (i, iv) in intervals.iter().enumerate() {
            let at = format!("{mode} interval {i}");
            open_windows[0] += check_direction(&iv["sender"], &iv["receiver"], sender_by, &at);
            if mode == "--bidir" {
                open_windows[1] += check_direction(
                    &iv["reverse"]["sender"],
                    &iv["reverse"]["receiver"],
                    "server",
                    &at,
                );
            }
        }
        let directions = if mode == "--bidir" { 2 } else { 1 };
        for (d, open) in open_windows.iter().take(directions).enumerate() {
            // Every receive sample carries its window, and most are open.
            assert!(
                *open * 2 > 2 * intervals.len(),
                "{mode} direction {d}: {open} of {} receive samples with an open window",
                2 * intervals.len()
            );
        }
    }
}

/// One direction of one interval: two connections sampled on each end, by the right side,
/// with non-zero sender RTT, cwnd and delivery rate, a receive buffer and a receive window
/// read (how many of the two were open is returned).
fn check_direction(snd: &Value, rcv: &Value, sender_by: &str, at: &str) -> usize {
    let receiver_by = if sender_by == "client" {
        "server"
    } else {
        "client"
    };
    assert_eq!(snd["measured_by"], sender_by, "{at}");
    assert_eq!(rcv["measured_by"], receiver_by, "{at}");
    for (side, transfer) in [(snd, "send"), (rcv, "receive")] {
        let tcp = side["tcp"].as_array().unwrap();
        assert_eq!(tcp.len(), 2, "{at}: {transfer} samples {tcp:?}");
        for t in tcp {
            assert_eq!(t["transfer"], transfer, "{at}: {t}");
            let positive = |k: &str| t[k].as_f64().is_some_and(|v| v > 0.0);
            let keys: &[&str] = if transfer == "send" {
                &[
                    "srtt_us",
                    "cwnd_segments",
                    "delivery_rate_bits_per_second",
                    "mss_bytes",
                ]
            } else {
                assert!(t["rcv_wnd_bytes"].is_u64(), "{at}: no window read: {t}");
                &["rcv_space_bytes"]
            };
            for k in keys {
                assert!(
                    positive(k),
                    "{at}: {transfer} sample has {k} = {}: {t}",
                    t[k]
                );
            }
        }
    }
    let windows = rcv["tcp"].as_array().unwrap().iter();
    windows
        .filter(|t| t["rcv_wnd_bytes"].as_u64() > Some(0))
        .count()
}

/// A sysctl held at a value while it lives, and put back as it was when dropped (also when
/// the test fails).
struct Sysctl {
    path: &'static str,
    was: String,
}

impl Sysctl {
    fn hold(path: &'static str, value: &str) -> Sysctl {
        let was = std::fs::read_to_string(path).unwrap().trim().to_string();
        std::fs::write(path, value).unwrap();
        Sysctl { path, was }
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path, &self.was);
    }
}
