//! Issue 54: a mesh probe's departure (T1) is the kernel's transmit stamp, read from the
//! prober socket's error queue, not the clock read the probe was written with. Planted: a
//! queue in the probing host's own qdisc (tbf, kept full by a bounded filler flow), which
//! every packet it sends waits in before the driver takes it. ping, timed by its process,
//! counts that wait; the mesh's round trips from that host do not, and every answer is
//! counted as timed by the kernel's stamp. Then the same hold on the REFLECTOR's host: its
//! answers wait there after their T3 was written, and the next answer's Follow-Up
//! Telemetry TLV tells the prober when each really left (T3 from the kernel's stamp).

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::mesh_lab::{series, wait_until, MeshLab};
use common::{need_tools, temp_file, Lab};

/// The agent-level counter `family{...extra...}` in `text`.
fn own(text: &str, family: &str, extra: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .find(|l| l.contains(extra))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Answers timed by the kernel's stamp, by the process's clock, round trips, of them at
/// most 25 ms, their sum in s.
type Figures = (f64, f64, f64, f64, f64);

/// What host `k`'s scrape says of its probes to `peer`: (answers timed by the kernel's
/// stamp, by the process's clock, round trips, of them at most 25 ms, their sum in s).
fn figures_of(lab: &MeshLab, k: usize, peer: &str) -> Figures {
    figures_in(&lab.scrape(k), peer)
}

/// [`figures_of`] from one scrape's `text`.
fn figures_in(text: &str, peer: &str) -> Figures {
    let departures = "sonde_mesh_answered_departures_total";
    let rtt = |f: &str, extra: &str| series(text, f, peer, extra).unwrap_or(0.0);
    (
        own(text, departures, "clock=\"kernel\"").unwrap_or(-1.0),
        own(text, departures, "clock=\"process\"").unwrap_or(-1.0),
        rtt("sonde_mesh_rtt_seconds_count", ""),
        rtt("sonde_mesh_rtt_seconds_bucket", "le=\"0.025\""),
        rtt("sonde_mesh_rtt_seconds_sum", ""),
    )
}

fn figures(lab: &MeshLab, peer: &str) -> (f64, f64, f64, f64, f64) {
    figures_of(lab, 1, peer)
}

/// ping's round trips (ms) from `ns` to `to`, 10 of them 100 ms apart.
fn ping_ms(ns: &str, to: &str) -> Vec<f64> {
    let out = Lab::in_ns(ns, "ping")
        .args(["-n", "-c", "10", "-i", "0.1", "-W", "2", to])
        .output()
        .unwrap();
    let mut ms: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split("time=").nth(1)?.split(' ').next()?.parse().ok())
        .collect();
    ms.sort_by(f64::total_cmp);
    ms
}

/// The veth of namespace `ns` (its one link besides lo).
fn link_of(ns: &str) -> String {
    let out = Command::new("ip")
        .args(["-n", ns, "-o", "link", "show"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
        .find(|n| n != "lo")
        .expect("a veth")
}

/// The hold: `ns`'s egress at 800 kbit/s, its queue (6000 bytes) kept full by a filler of
/// 1000-byte datagrams at twice that for `secs` s: each packet `ns` sends waits behind
/// about 5 of them (52 ms) before its driver takes it. Returns 0.5 s in, the queue full.
fn hold(ns: &str, secs: u32) -> std::process::Child {
    let dev = link_of(ns);
    let tbf = ["rate", "800kbit", "burst", "1600", "limit", "6000"];
    let ok = Lab::in_ns(ns, "tc")
        .args(["qdisc", "replace", "dev", &dev, "root", "tbf"])
        .args(tbf)
        .status()
        .unwrap();
    assert!(ok.success(), "tc qdisc replace tbf on {dev}");
    let filler = "import socket, sys, time\n\
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
        end = time.time() + float(sys.argv[2])\n\
        while time.time() < end:\n    s.sendto(b'x' * 1000, (sys.argv[1], 9)); time.sleep(0.005)\n";
    let fill = Lab::in_ns(ns, "python3")
        .args(["-c", filler, "198.18.4.254", &secs.to_string()])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    fill
}

#[test]
fn a_probe_held_in_its_hosts_qdisc_is_timed_from_its_kernel_stamp() {
    if !need_tools(&["python3", "tc", "ping"]) {
        return;
    }
    let Some(lab) = MeshLab::new(1) else { return };
    let list = temp_file("mesh-stamps");
    std::fs::write(
        &list,
        format!("{}\n{}\n", lab.host_addr(1), lab.host_addr(2)),
    )
    .unwrap();
    // Follow-ups off: the round trips below are the prober's stamps' alone.
    let fast = [
        "--mesh-rate",
        "20",
        "--mesh-timeout",
        "0.5",
        "--mesh-follow-up",
        "off",
    ];
    let _agents: Vec<_> = (1..=2)
        .map(|k| lab.start_agent(k, list.to_str().unwrap(), &fast))
        .collect();
    let peer = lab.host_addr(2);
    wait_until("ten answers", Duration::from_secs(20), || {
        let f = figures(&lab, &peer);
        (f.2 >= 10.0).then_some(()).ok_or(format!("{f:?}"))
    });
    // A normal run: every answer timed by its stamp, all as fast as ping's.
    let calm = ping_ms(&lab.hosts[0], &peer);
    let before = figures(&lab, &peer);
    eprintln!("calm: ping {calm:?} ms; mesh (kernel, process, rtts, <= 25 ms) {before:?}");
    assert_eq!(
        before.1, 0.0,
        "answers timed by the process's clock: {before:?}"
    );
    assert!(before.0 >= before.2, "{before:?}");
    assert_eq!(before.3, before.2, "round trips over 25 ms: {before:?}");
    assert!(calm.len() >= 5 && calm[calm.len() / 2] < 25.0, "{calm:?}");

    let mut fill = hold(&lab.hosts[0], 4);
    let start = figures(&lab, &peer);
    let back = figures_of(&lab, 2, &lab.host_addr(1));
    let held = ping_ms(&lab.hosts[0], &peer);
    let end = figures(&lab, &peer);
    let back_end = figures_of(&lab, 2, &lab.host_addr(1));
    let _ = fill.wait();
    let rtts = end.2 - start.2;
    eprintln!(
        "held: ping {held:?} ms; mesh during it: {rtts} round trips (mean {:.3} ms), {} at most 25 ms, answers by kernel stamp {}, by the process's clock {}",
        (end.4 - start.4) / rtts.max(1.0) * 1e3,
        end.3 - start.3,
        end.0 - start.0,
        end.1 - start.1
    );
    // At 20 probes a second an answer's stamp (52 ms after it) often comes after the
    // session's next answer was written: see the next test for the reflector's side.
    eprintln!(
        "held: host 2's round trips to host 1 (answers from host 1's reflector): {} (mean {:.3} ms)",
        back_end.2 - back.2,
        (back_end.4 - back.4) / (back_end.2 - back.2).max(1.0) * 1e3
    );
    // The cause is there: ping waits in the queue.
    assert!(held.len() >= 5 && held[held.len() / 2] >= 35.0, "{held:?}");
    // The mesh's probes waited as long, yet their round trips start when they left.
    assert!(rtts >= 10.0, "{start:?} -> {end:?}");
    assert_eq!(
        end.3 - start.3,
        rtts,
        "round trips over 25 ms: {start:?} -> {end:?}"
    );
    assert_eq!(end.1, 0.0, "answers timed by the process's clock: {end:?}");
    assert!(end.0 - start.0 >= rtts, "{start:?} -> {end:?}");
    // With `--mesh-follow-up off` no probe asks for its answer's departure: every answer
    // is booked by its reflector's clock read, none by a stamp.
    let (booked, t3) = with_t3(&lab, &lab.host_addr(1));
    assert!(
        booked.2 >= 10.0 && t3 == (0.0, booked.2),
        "{booked:?} {t3:?}"
    );
}

/// What one scrape of host 2's says of its probes to `peer` ([`figures_in`]) and of its
/// answers' reflector departures: (T3 by the peer's kernel stamp, by its clock read).
/// One scrape: an answer's round trip and its T3's count are booked together.
fn with_t3(lab: &MeshLab, peer: &str) -> (Figures, (f64, f64)) {
    let text = lab.scrape(2);
    let name = "sonde_mesh_answered_reflector_departures_total";
    let t3 = (
        own(&text, name, "t3=\"stamp\"").unwrap_or(-1.0),
        own(&text, name, "t3=\"clock\"").unwrap_or(-1.0),
    );
    (figures_in(&text, peer), t3)
}

/// The hold on the REFLECTOR's host, the agents asking follow-ups by default: host 1's
/// answers to host 2's probes wait ~52 ms in host 1's qdisc after their T3 was written
/// (ping from host 2 shows it). Each next answer's follow-up tells when the last really
/// left, so host 2's round trips to host 1 stay within 2 ms of their unheld mean
/// (uncorrected they were 48.9 ms), and its answers are counted as booked by the
/// reflector's kernel stamp (t3="stamp"); one whose next answer the full queue dropped is
/// booked by the clock read, counted so, and only such a one is over 25 ms.
#[test]
fn an_answer_held_in_its_reflectors_qdisc_is_timed_from_its_kernel_stamp() {
    if !need_tools(&["python3", "tc", "ping"]) {
        return;
    }
    let Some(lab) = MeshLab::new(1) else { return };
    let list = temp_file("mesh-t3");
    std::fs::write(
        &list,
        format!("{}\n{}\n", lab.host_addr(1), lab.host_addr(2)),
    )
    .unwrap();
    // 5 probes a second: an answer's stamp, 52 ms late under the hold, is read before the
    // session's next probe comes (200 ms on). No flag: follow-ups are the default.
    let slow = ["--mesh-rate", "5", "--mesh-timeout", "0.5"];
    let _agents: Vec<_> = (1..=2)
        .map(|k| lab.start_agent(k, list.to_str().unwrap(), &slow))
        .collect();
    let reflector = lab.host_addr(1);
    wait_until("ten answers", Duration::from_secs(20), || {
        let f = figures_of(&lab, 2, &reflector);
        (f.2 >= 10.0).then_some(()).ok_or(format!("{f:?}"))
    });
    let (calm, calm_t3) = with_t3(&lab, &reflector);
    let calm_ms = calm.4 / calm.2 * 1e3;
    eprintln!(
        "calm: host 2 -> host 1 {calm:?} (mean {calm_ms:.3} ms), t3 (stamp, clock) {calm_t3:?}"
    );
    // Every one booked so far by the reflector's stamp.
    assert_eq!(calm_t3, (calm.2, 0.0), "{calm_t3:?} of {calm:?}");

    let mut fill = hold(&lab.hosts[0], 8);
    let (start, start_t3) = with_t3(&lab, &reflector);
    let held = ping_ms(&lab.hosts[1], &reflector);
    std::thread::sleep(Duration::from_secs(5));
    let (end, end_t3) = with_t3(&lab, &reflector);
    let _ = fill.wait();
    let rtts = end.2 - start.2;
    let held_ms = (end.4 - start.4) / rtts.max(1.0) * 1e3;
    let (stamped, clocked) = (end_t3.0 - start_t3.0, end_t3.1 - start_t3.1);
    eprintln!(
        "held on the reflector's host: ping {held:?} ms; host 2 -> host 1: {rtts} round trips, \
         mean {held_ms:.3} ms (calm {calm_ms:.3}), {} at most 25 ms; t3 by stamp {stamped}, by clock {clocked}",
        end.3 - start.3
    );
    // The cause is there: ping's replies wait in host 1's queue.
    assert!(held.len() >= 5 && held[held.len() / 2] >= 35.0, "{held:?}");
    assert!(rtts >= 10.0, "{start:?} -> {end:?}");
    // Each booked once, by its reflector's stamp or by its clock read: an answer's round
    // trip and its T3 are counted together.
    assert_eq!(stamped + clocked, rtts, "{start_t3:?} -> {end_t3:?}");
    // The hold is not network time where a follow-up told it: a round trip over 25 ms
    // only where none came. The queue is full, so it may drop the session's next answer
    // (ci57: 1 of 35, booked by the clock read 48 ms, counted); most are stamped.
    let over = rtts - (end.3 - start.3);
    assert!(
        over <= clocked && clocked <= (rtts / 10.0).max(1.0),
        "{over} over 25 ms, {clocked} by the clock of {rtts}: {start:?} -> {end:?}"
    );
    // The mean within 2 ms of the calm one, each answer booked by the clock allowed the
    // queue's whole drain: its limit and burst at its rate (7,600 bytes at 800 kbit/s).
    let allowance_ms = 2.0 + clocked * 76.0 / rtts;
    assert!(
        held_ms < calm_ms + allowance_ms,
        "{held_ms} ms against {calm_ms} ms + {allowance_ms}"
    );
}
