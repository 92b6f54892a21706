//! Issue 54: a mesh probe's departure (T1) is the kernel's transmit stamp, read from the
//! prober socket's error queue, not the clock read the probe was written with. Planted: a
//! queue in the probing host's own qdisc (tbf, kept full by a bounded filler flow), which
//! every packet it sends waits in before the driver takes it. ping, timed by its process,
//! counts that wait; the mesh's round trips from that host do not, and every answer is
//! counted as timed by the kernel's stamp.

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

/// What host `k`'s scrape says of its probes to `peer`: (answers timed by the kernel's
/// stamp, by the process's clock, round trips, of them at most 25 ms, their sum in s).
fn figures_of(lab: &MeshLab, k: usize, peer: &str) -> (f64, f64, f64, f64, f64) {
    let text = lab.scrape(k);
    let departures = "sonde_mesh_answered_departures_total";
    let rtt = |f: &str, extra: &str| series(&text, f, peer, extra).unwrap_or(0.0);
    (
        own(&text, departures, "clock=\"kernel\"").unwrap_or(-1.0),
        own(&text, departures, "clock=\"process\"").unwrap_or(-1.0),
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
    let fast = ["--mesh-rate", "20", "--mesh-timeout", "0.5"];
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

    // The hold: host 1's egress at 800 kbit/s, its queue (6000 bytes) kept full by a
    // filler of 1000-byte datagrams at twice that for 4 s: each packet host 1 sends
    // waits behind about 5 of them (52 ms) before its driver takes it.
    let dev = link_of(&lab.hosts[0]);
    let tbf = ["rate", "800kbit", "burst", "1600", "limit", "6000"];
    let ok = Lab::in_ns(&lab.hosts[0], "tc")
        .args(["qdisc", "add", "dev", &dev, "root", "tbf"])
        .args(tbf)
        .status()
        .unwrap();
    assert!(ok.success(), "tc qdisc add tbf on {dev}");
    let filler = "import socket, sys, time\n\
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
        end = time.time() + 4\n\
        while time.time() < end:\n    s.sendto(b'x' * 1000, (sys.argv[1], 9)); time.sleep(0.005)\n";
    let mut fill = Lab::in_ns(&lab.hosts[0], "python3")
        .args(["-c", filler, "198.18.4.254"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
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
    // Not corrected (left): host 1's reflector writes T3 before its answer waits in the
    // same queue, so host 2's round trips to host 1 keep that wait.
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
}
