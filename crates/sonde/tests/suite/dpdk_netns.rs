//! `--engine dpdk` across two namespaces: each side runs dpdk-testpmd on its veth through
//! net_af_packet without hugepages (the only device a namespace has). Both sides' counts
//! are present and labelled, the receiver's agrees with its veth's own counter, the
//! document names the DPDK version and both command lines, and no testpmd outlives a
//! test, however it ends. The checks before start give errors that say what to do.

use crate::common;

use std::time::Duration;

use common::*;

const TESTPMD: &str = "dpdk-testpmd";
/// Hugepages are not asked of the test machine: testpmd runs on ordinary pages, here
/// and (`SERVER_NO_HUGE`) on the agent.
const NO_HUGE: &str = "--dpdk-args=--no-huge";
const SERVER_NO_HUGE: &str = "--server-dpdk-args=--no-huge";
/// The DPDK engine at both ends, on ordinary pages.
const DPDK: [&str; 4] = ["--engine", "dpdk", NO_HUGE, SERVER_NO_HUGE];

/// testpmd processes whose file prefix names process `pid` (sonde's own naming).
fn testpmds_of(pid: u32) -> usize {
    let o = run({
        let mut c = std::process::Command::new("pgrep");
        c.args(["-f", &format!("file-prefix sonde-{pid}-")]);
        c
    });
    stdout(&o).lines().count()
}

/// Whether process `pid`'s testpmd count becomes `want` within 5 s.
fn testpmds_become(pid: u32, want: usize) -> bool {
    (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        testpmds_of(pid) == want
    })
}

#[test]
fn pps_over_dpdk_counts_both_sides_and_agrees_with_the_veth() {
    let Some(lab) = Lab::needing(&[TESTPMD]) else {
        return;
    };
    let agent = lab.start_agent_with(&["--allow", "dpdk"]);
    let rx_before = lab.server_rx_packets();
    let args = [&DPDK[..], &["-t", "3", "--json", "--no-save"]].concat();
    let o = run(lab.sonde(&agent, "pps", &args));
    let rx_delta = lab.server_rx_packets() - rx_before;
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &doc["end"]["packets"];
    for (side, role, mode) in [
        ("sender", "client", "txonly"),
        ("receiver", "server", "rxonly"),
    ] {
        let s = &p[side];
        assert_eq!(
            (s["engine"].as_str(), s["measured_by"].as_str()),
            (Some("dpdk"), Some(role))
        );
        let bypass = &s["bypass"];
        let command = bypass["command"].as_str().unwrap_or("");
        assert!(
            command.contains(&format!("--forward-mode={mode}")),
            "{command}"
        );
        assert!(
            command.contains("--vdev=net_af_packet0,iface="),
            "{command}"
        );
        assert!(
            bypass["version"]
                .as_str()
                .unwrap_or("")
                .starts_with("DPDK "),
            "{bypass}"
        );
        assert!(s["packets"].as_u64().unwrap() > 10_000, "{side}: {s}");
        let port = &s["port"];
        assert_eq!(port["queues"].as_array().map(Vec::len), Some(1), "{port}");
        // testpmd polls: the core its forwarding lcore is pinned to never idles. Not its
        // CPU seconds: on a shared 2-vCPU machine other processes take a share of that
        // core (0.63 s of 2.97 s under a load of 10), but a core with a poller on it
        // never goes idle, while one whose thread waited for packets would (margin: 2 %
        // of idle for /proc/stat's tick accounting).
        let cores = s["cpu"]["worker_cpus"]
            .as_array()
            .expect("the pinned core's time");
        assert_eq!(cores.len(), 1, "{s}");
        let idle = cores[0]["idle_percent"].as_f64().unwrap();
        assert!(idle < 2.0, "testpmd polls, its core idled {idle} %: {s}");
        assert!(s["cpu"]["process_cpu_s"].as_f64().unwrap() > 0.0, "{s}");
    }
    assert!(
        p["sender"]["bypass"]["command"]
            .as_str()
            .unwrap()
            .contains("--tx-ip=198.18.0.1,198.18.0.2"),
        "{p}"
    );
    // The veth also carried the control connection and ARP, and net_af_packet also sees
    // the kernel's own packets leaving the veth: a few hundred either way. The port's
    // count is what reached it: the packets it took, and those it dropped for want of a
    // descriptor or an mbuf (on a busy machine, 6.9 k of 266 k in one CI run at a load
    // of 16, when testpmd's core was taken from it). Margin: 1 % of the veth's.
    let port = &p["receiver"]["port"];
    let count = |k: &str| port[k].as_u64().unwrap_or(0);
    let received = count("packets");
    let reached = received + count("missed") + count("no_mbuf");
    eprintln!("testpmd received {received}, reached {reached}; the veth received {rx_delta}");
    assert!(
        reached.abs_diff(rx_delta) as f64 <= rx_delta as f64 * 0.01,
        "testpmd {reached} ({received} received) against the veth's {rx_delta}: {port}"
    );
    let intervals = doc["intervals"].as_array().unwrap();
    assert!(intervals.len() >= 3, "{intervals:?}");
    for i in intervals {
        for side in ["sender", "receiver"] {
            assert!(i[side]["packets_per_second"].as_f64().unwrap() > 0.0, "{i}");
        }
    }
    assert!(
        testpmds_become(agent.child.id(), 0),
        "the agent's testpmd outlived the test"
    );
}

#[test]
fn each_side_runs_its_own_dpdk_args_and_this_hosts_may_be_switches_an_agent_refuses() {
    let Some(lab) = Lab::needing(&[TESTPMD]) else {
        return;
    };
    let agent = lab.start_agent_with(&["--allow", "dpdk"]);
    // --no-pci: an EAL switch no agent takes from a controller, here for this host only.
    let args = [
        "--engine",
        "dpdk",
        "--dpdk-args=--no-huge --no-pci -- --mbcache=300",
        "--server-dpdk-args=--no-huge -- --mbcache=256",
        "-t",
        "1",
        "--json",
        "--no-save",
    ];
    let o = run(lab.sonde(&agent, "pps", &args));
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &doc["end"]["packets"];
    let command = |side: &str| {
        let c = p[side]["bypass"]["command"].as_str().unwrap_or("");
        c.split_whitespace().map(String::from).collect::<Vec<_>>()
    };
    let (sender, receiver) = (command("sender"), command("receiver"));
    let count = |c: &[String], w: &str| c.iter().filter(|a| *a == w).count();
    // sonde's own --no-pci for a net_af_packet vdev on both; the user's on this host's only.
    assert_eq!(count(&sender, "--no-pci"), 2, "{sender:?}");
    assert_eq!(count(&receiver, "--no-pci"), 1, "{receiver:?}");
    assert_eq!(count(&sender, "--mbcache=300"), 1, "{sender:?}");
    assert_eq!(count(&receiver, "--mbcache=256"), 1, "{receiver:?}");
    assert_eq!(
        count(&sender, "--mbcache=256") + count(&receiver, "--mbcache=300"),
        0
    );
    for side in ["sender", "receiver"] {
        assert!(p[side]["packets"].as_u64().unwrap() > 1_000, "{side}: {p}");
    }
    // The same switch sent for the agent's testpmd: refused by the agent, naming the flag.
    let args = [
        "--engine",
        "dpdk",
        NO_HUGE,
        "--server-dpdk-args=--no-huge --no-pci",
        "-t",
        "1",
        "--no-save",
    ];
    let o = run(lab.sonde(&agent, "pps", &args));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("--server-dpdk-args"), "{e}");
    assert!(
        e.contains("\"--no-pci\" is not among the switches an agent takes from a controller"),
        "{e}"
    );
    assert!(
        testpmds_become(agent.child.id(), 0),
        "the agent's testpmd outlived the test"
    );
}

#[test]
fn a_killed_agent_or_controller_leaves_no_testpmd_running() {
    let Some(lab) = Lab::needing(&[TESTPMD, "pgrep"]) else {
        return;
    };
    let args = [&DPDK[..], &["-t", "20", "--no-save"]].concat();
    // The agent dies: the kernel kills its testpmd (PR_SET_PDEATHSIG); the controller
    // ends partial and stops its own.
    let mut agent = lab.start_agent_with(&["--allow", "dpdk"]);
    let mut client = lab.sonde(&agent, "pps", &args).spawn_keeping(Keep::Nothing);
    let (agent_pid, client_pid) = (agent.child.id(), client.id());
    assert!(testpmds_become(agent_pid, 1), "the agent's testpmd started");
    assert!(
        testpmds_become(client_pid, 1),
        "the controller's testpmd started"
    );
    agent.kill();
    assert!(
        testpmds_become(agent_pid, 0),
        "a killed agent left its testpmd"
    );
    let status = wait_with_timeout(&mut client, Duration::from_secs(10)).expect("client ended");
    assert_eq!(status.code(), Some(3), "a partial result");
    assert_eq!(
        testpmds_of(client_pid),
        0,
        "the controller left its testpmd"
    );
    // The controller dies: its testpmd with it, and the agent ends the test and its own.
    let agent = lab.start_agent_with(&["--allow", "dpdk"]);
    let mut client = lab.sonde(&agent, "pps", &args).spawn_keeping(Keep::Nothing);
    let client_pid = client.id();
    assert!(
        testpmds_become(agent.child.id(), 1) && testpmds_become(client_pid, 1),
        "both started"
    );
    client.kill().unwrap();
    client.wait().unwrap();
    assert!(
        testpmds_become(client_pid, 0),
        "a killed controller left its testpmd"
    );
    assert!(
        testpmds_become(agent.child.id(), 0),
        "the agent kept testpmd after its controller died"
    );
    // The next testpmd sonde starts sweeps what the killed processes could not remove.
    let args = [&DPDK[..], &["-t", "1", "--no-save"]].concat();
    let o = run(lab.sonde(&agent, "pps", &args));
    assert!(o.status.success(), "{}", stderr(&o));
    let runtime = std::fs::read_dir("/var/run/dpdk")
        .into_iter()
        .flatten()
        .flatten();
    let names: Vec<String> = runtime
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .collect();
    for pid in [agent_pid, client_pid] {
        let head = format!("sonde-{pid}-");
        assert!(
            !names.iter().any(|n| n.starts_with(&head)),
            "{head}* left behind: {names:?}"
        );
    }
}

/// Sets vm.nr_hugepages for a test and puts the old value back, however the test ends.
struct Hugepages(String);

impl Hugepages {
    fn set(n: u32) -> Hugepages {
        let old = std::fs::read_to_string("/proc/sys/vm/nr_hugepages").unwrap();
        std::fs::write("/proc/sys/vm/nr_hugepages", n.to_string()).unwrap();
        Hugepages(old.trim().to_string())
    }
}

impl Drop for Hugepages {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/vm/nr_hugepages", &self.0);
    }
}

/// The stderr of a command that must exit with `code`.
fn failing(cmd: std::process::Command, code: i32) -> String {
    let o = run(cmd);
    assert_eq!(o.status.code(), Some(code), "{}", stderr(&o));
    stderr(&o)
}

#[test]
fn missing_testpmd_or_hugepages_give_errors_that_say_what_to_do() {
    let Some(lab) = Lab::needing(&[TESTPMD]) else {
        return;
    };
    let agent = lab.start_agent_with(&["--allow", "dpdk"]);
    // A one-second dpdk test with `extra` flags, refused with exit code 1.
    let refused = |extra: &[&str]| {
        let mut args = vec!["--engine", "dpdk", "-t", "1", "--no-save"];
        args.extend(extra);
        failing(lab.sonde(&agent, "pps", &args), 1)
    };
    // No testpmd on this host's PATH: refused before the agent is asked.
    let mut cmd = Lab::in_ns(&lab.client, "env");
    cmd.args(["PATH=/var/empty", SONDE, "pps", lab.server_addr])
        .args(["--port", &agent.port.to_string()])
        .args(["--engine", "dpdk", NO_HUGE, "-t", "1", "--no-save"]);
    let e = failing(cmd, 1);
    assert!(
        e.contains("--engine dpdk: dpdk-testpmd or testpmd not found in PATH"),
        "{e}"
    );
    assert!(e.contains("apt-get install dpdk-dev"), "{e}");
    // No hugepages: the count needed, and the way out.
    let none = Hugepages::set(0);
    let e = refused(&[]);
    drop(none);
    assert!(
        e.contains("free hugepages of 2 MiB and this host has 0 free"),
        "{e}"
    );
    assert!(
        e.contains("/proc/sys/vm/nr_hugepages") && e.contains("--no-huge"),
        "{e}"
    );
    // A PCI device the kernel owns (or none at that address): named, with what to do.
    let e = refused(&[NO_HUGE, "--dpdk-dev", "0000:00:00.0"]);
    assert!(e.contains("--dpdk-dev 0000:00:00.0"), "{e}");
    assert!(
        e.contains("vfio-pci") || e.contains("no such PCI device"),
        "{e}"
    );
    // A paced rate on a device without a queue rate limiter (testpmd's only pacer).
    let e = refused(&[NO_HUGE, SERVER_NO_HUGE, "--rate", "10000"]);
    assert!(
        e.contains("--rate (and --search") && e.contains("queue rate limiter"),
        "{e}"
    );
    assert!(
        testpmds_become(agent.child.id(), 0),
        "a refused test left the agent's testpmd"
    );
    // A dpdk flag without the engine names the flag.
    let e = failing(
        lab.sonde(&agent, "pps", &["--tx-queues", "2", "-t", "1", "--no-save"]),
        2,
    );
    assert!(e.contains("--tx-queues"), "{e}");
}
