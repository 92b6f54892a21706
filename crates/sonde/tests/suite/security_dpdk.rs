//! A rogue controller against an agent running as root in a namespace: nothing executable
//! or path-like from the network reaches a process, a file or a kernel module name, and
//! engines and third-party parts run only where the agent's operator allowed them.
//!
//! The controller is the harness's rogue (the library's own `ClientSession` over a
//! `TcpStream`, with the harness's key) sending a hand-built spec from a thread that
//! joined the client namespace. The agent's PATH starts with a stand-in `dpdk-testpmd` that logs
//! every start and does what EAL would with the hostile arguments (loads a `-d` library,
//! creates a vdev's `tx_pcap` file): each attack must be refused, naming the agent flag
//! that would allow it, before any testpmd starts. (A stand-in, because the real EAL
//! refuses plugins under a world-writable directory such as /tmp; from a root-owned one,
//! `dpdk-testpmd -d LIB` runs LIB's constructor as root, tried with DPDK 22.11.)

use crate::common;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::rogue::{self, Answer};
use common::*;
use sonde_proto::ThirdParty;
use sonde_results::{DpdkSpec, PpsSpec, StreamSpec, TestSpec};

/// How long the watcher looks for a testpmd: the rogue's own limit (15 s) and a margin.
const SESSION_LIMIT: Duration = Duration::from_secs(20);

/// Scratch files of one test, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = temp_file(name);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A shared object whose constructor creates `marker`: loaded, it leaves a trace.
fn build_canary(dir: &Scratch, marker: &Path) -> PathBuf {
    let src = dir.path("canary.c");
    let so = dir.path("canary.so");
    let code = format!(
        "#include <fcntl.h>\n#include <unistd.h>\n\
         __attribute__((constructor)) static void canary(void) {{\n\
           int fd = open(\"{}\", O_CREAT | O_WRONLY, 0600); if (fd >= 0) close(fd);\n}}\n",
        marker.display()
    );
    std::fs::write(&src, code).unwrap();
    let o = run({
        let mut c = std::process::Command::new("cc");
        c.args(["-shared", "-fPIC", "-o"]).arg(&so).arg(&src);
        c
    });
    assert!(o.status.success(), "cc: {}", stderr(&o));
    so
}

/// A stand-in dpdk-testpmd in `dir`: logs its arguments to `started.log`, loads each
/// `-d` library and creates each vdev's `tx_pcap` file as EAL would, then fails.
fn fake_testpmd(dir: &Scratch) -> PathBuf {
    let bin = dir.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> {log}\n\
         while [ $# -gt 0 ]; do case \"$1\" in\n\
           -d) python3 -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' \"$2\" ;;\n\
           *tx_pcap=*) touch \"${{1##*tx_pcap=}}\" ;;\n\
         esac; shift; done\nexit 1\n",
        log = dir.path("started.log").display()
    );
    let exe = bin.join("dpdk-testpmd");
    std::fs::write(&exe, script).unwrap();
    std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    bin
}

/// `sonde serve` in the lab's server namespace with `args`, the stand-in testpmd first
/// on its PATH.
fn agent(lab: &Lab, dir: &Scratch, args: &[&str]) -> Agent {
    let path = format!(
        "{}:{}",
        fake_testpmd(dir).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Lab::in_ns(&lab.server, SONDE);
    cmd.env("PATH", path)
        .args(["serve", "--bind", lab.server_addr, "--port", "0"])
        .args(args);
    Agent::start(cmd)
}

/// A rogue controller's Setup: `Ok` if the agent got ready (the attack was taken), its
/// refusal otherwise.
fn rogue(ns: &str, to: SocketAddr, spec: TestSpec, part: Option<ThirdParty>) -> Result<(), String> {
    let key = Some(rogue::harness_key());
    match rogue::in_netns(ns, move || rogue::setup(to, spec, part, key)) {
        Answer::Ready { .. } => Ok(()),
        Answer::Refused(e) => Err(e),
    }
}

fn agent_addr(lab: &Lab, agent: &Agent) -> SocketAddr {
    SocketAddr::new(lab.server_addr.parse().unwrap(), agent.port)
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

/// A pps spec for `--engine dpdk` with the server's `eal`/`testpmd` arguments
/// (`--server-dpdk-args`) and a server device.
fn dpdk_spec(eal: &[&str], testpmd: &[&str], server_device: Option<&str>) -> TestSpec {
    let mut p = PpsSpec::default();
    p.timing.duration_ms = 1_000;
    p.execution.engine = "dpdk".parse().unwrap();
    p.dpdk = Some(Box::new(DpdkSpec {
        server_device: server_device.map(String::from),
        server_eal_args: words(eal),
        server_testpmd_args: words(testpmd),
        ..DpdkSpec::default()
    }));
    TestSpec::Pps(p)
}

/// Processes whose command line names testpmd and agent `pid`'s file prefix.
fn testpmds_of(pid: u32) -> usize {
    let prefix = format!("sonde-{pid}-");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("testpmd") && c.contains(&prefix))
        .count()
}

/// Runs the rogue session while watching for the agent's testpmd every 10 ms; the
/// refusal, and how many times a testpmd was seen.
fn attack(lab: &Lab, agent: &Agent, spec: TestSpec, part: Option<ThirdParty>) -> (String, usize) {
    let to = agent_addr(lab, agent);
    let pid = agent.child.id();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            let mut seen = 0;
            let until = Instant::now() + SESSION_LIMIT;
            while !done.load(std::sync::atomic::Ordering::Acquire) && Instant::now() < until {
                seen += testpmds_of(pid);
                std::thread::sleep(Duration::from_millis(10));
            }
            seen
        });
        let outcome = rogue(&lab.client, to, spec, part);
        std::thread::sleep(Duration::from_millis(200));
        done.store(true, std::sync::atomic::Ordering::Release);
        let seen = watcher.join().unwrap();
        let refusal = outcome.expect_err("the agent got ready for a hostile spec");
        (refusal, seen)
    })
}

/// The refusal names `--allow WORD`: the agent's own (it refuses the Setup), or the
/// controller's when the agent did not announce `capability` in the first place.
fn names_allow(e: &str, word: &str, capability: &str) -> bool {
    e.contains(&format!("--allow {word}")) || (e.contains(capability) && e.contains("--allow"))
}

fn need_lab() -> Option<Lab> {
    if !need_tools(&["cc", "python3"]) {
        return None;
    }
    Lab::new()
}

#[test]
fn an_eal_library_from_the_network_is_never_loaded() {
    let Some(lab) = need_lab() else { return };
    let dir = Scratch::new("canary");
    let marker = dir.path("canary-ran");
    let so = build_canary(&dir, &marker);
    // The canary works: loaded, it leaves its trace (so its absence below means something).
    let o = run({
        let mut c = std::process::Command::new("python3");
        c.args(["-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])"])
            .arg(&so);
        c
    });
    assert!(o.status.success() && marker.exists(), "{}", stderr(&o));
    std::fs::remove_file(&marker).unwrap();

    let agent = agent(&lab, &dir, &["--allow", "dpdk"]);
    let so = so.to_str().unwrap();
    for eal in [
        vec!["--no-huge", "-d", so],
        vec!["--no-huge", &format!("-d{so}")],
        vec!["--no-huge", "--plugin-dir", so],
    ] {
        let (e, seen) = attack(&lab, &agent, dpdk_spec(&eal, &[], None), None);
        assert!(e.contains("--server-dpdk-args"), "{eal:?}: {e}");
        assert!(
            e.contains("start the agent with --dpdk-args"),
            "{eal:?}: {e}"
        );
        assert_eq!(seen, 0, "{eal:?}: a testpmd started");
    }
    // testpmd's own arguments are held to the same list.
    let (e, _) = attack(
        &lab,
        &agent,
        dpdk_spec(&["--no-huge"], &["--cmdline-file", so], None),
        None,
    );
    assert!(e.contains("start the agent with --dpdk-args"), "{e}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(!marker.exists(), "the canary library ran on the agent");
    assert!(!dir.path("started.log").exists(), "testpmd started");
}

#[test]
fn a_controllers_own_switches_never_reach_the_agents_testpmd() {
    let Some(lab) = need_lab() else { return };
    let dir = Scratch::new("own");
    let marker = dir.path("canary-ran");
    let so = build_canary(&dir, &marker);
    let so = so.to_str().unwrap();
    let agent = agent(&lab, &dir, &["--allow", "dpdk"]);
    // What a controller may use on its own host is refused as the server's.
    let (e, seen) = attack(&lab, &agent, dpdk_spec(&["--no-pci"], &[], None), None);
    assert!(e.contains("--server-dpdk-args"), "{e}");
    assert!(e.contains("\"--no-pci\" is not among the switches"), "{e}");
    assert_eq!(seen, 0, "a testpmd started");
    assert!(!dir.path("started.log").exists(), "testpmd started");
    // The client's switches (`--dpdk-args`) ride in the spec; serving, the agent drops
    // them: its testpmd (the stand-in, which then fails) gets only the server's.
    let mut spec = dpdk_spec(&["--no-huge"], &["--burst=64"], None);
    let TestSpec::Pps(p) = &mut spec else {
        unreachable!("a pps spec")
    };
    let d = p.dpdk.as_deref_mut().unwrap();
    d.client_eal_args = words(&["--no-pci", "-d", so]);
    d.client_testpmd_args = words(&["--cmdline-file", so]);
    let _ = rogue(&lab.client, agent_addr(&lab, &agent), spec, None);
    std::thread::sleep(Duration::from_millis(300));
    let log = std::fs::read_to_string(dir.path("started.log")).expect("testpmd started");
    assert!(log.contains("--burst=64"), "the server's switches: {log}");
    let args: Vec<&str> = log.split_whitespace().collect();
    assert!(
        !args.contains(&"-d") && !args.contains(&"--cmdline-file") && !log.contains(so),
        "the client's switches reached the agent's testpmd: {log}"
    );
    assert!(!marker.exists(), "the canary library ran on the agent");
}

#[test]
fn a_vdev_from_the_network_creates_no_file() {
    let Some(lab) = need_lab() else { return };
    let dir = Scratch::new("vdev");
    let target = dir.path("owned-by-root");
    let agent = agent(&lab, &dir, &["--allow", "dpdk"]);
    let vdev = format!("net_pcap1,iface=lo,tx_pcap={}", target.display());
    let as_eal = format!("--vdev={vdev}");
    let (e, seen) = attack(
        &lab,
        &agent,
        dpdk_spec(&["--no-huge", &as_eal], &[], None),
        None,
    );
    assert!(e.contains("start the agent with --dpdk-args"), "{e}");
    assert_eq!(seen, 0);
    // As the agent's device: a vdev string from the network is no device of the agent's.
    for device in [as_eal.as_str(), vdev.as_str(), &format!("vdev:{vdev}")] {
        let (e, seen) = attack(
            &lab,
            &agent,
            dpdk_spec(&["--no-huge"], &[], Some(device)),
            None,
        );
        assert!(e.contains("--server-dpdk-dev"), "{device}: {e}");
        assert!(
            e.contains("start the agent with --dpdk-dev"),
            "{device}: {e}"
        );
        assert_eq!(seen, 0, "{device}: a testpmd started");
    }
    // A PCI device with arguments, or one this host does not have.
    for device in ["0000:00:00.0", "0000:00:00.0,txq_inline=0"] {
        let (e, _) = attack(
            &lab,
            &agent,
            dpdk_spec(&["--no-huge"], &[], Some(device)),
            None,
        );
        assert!(
            e.contains("start the agent with --dpdk-dev"),
            "{device}: {e}"
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(!target.exists(), "the vdev's file was created");
    assert!(!dir.path("started.log").exists(), "testpmd started");
}

#[test]
fn engines_and_third_party_parts_need_the_agents_allow() {
    let Some(lab) = need_lab() else { return };
    let dir = Scratch::new("allow");
    let agent = agent(&lab, &dir, &[]);
    let (e, seen) = attack(&lab, &agent, dpdk_spec(&["--no-huge"], &[], None), None);
    assert!(names_allow(&e, "dpdk", "pps/dpdk"), "{e}");
    assert_eq!(seen, 0);
    let mut xdp = PpsSpec::default();
    xdp.timing.duration_ms = 1_000;
    xdp.execution.engine = "xdp".parse().unwrap();
    let (e, _) = attack(&lab, &agent, TestSpec::Pps(xdp), None);
    assert!(names_allow(&e, "xdp", "pps/xdp"), "{e}");
    let link = lab.server_cmd("ip", &["link", "show", &lab.server_if]);
    assert!(!link.contains("xdp"), "an XDP program was attached: {link}");
    // Either part of a test between two agents.
    let mut ping = sonde_results::RrSpec::default();
    ping.timing.duration_ms = 1_000;
    let client: IpAddr = CLIENT_ADDR.parse().unwrap();
    // Built from JSON, so that fields the protocol adds (a grant) keep their defaults.
    let part = |v: serde_json::Value| -> ThirdParty { serde_json::from_value(v).unwrap() };
    let victim = SocketAddr::new(client, 9).to_string();
    for part in [
        part(serde_json::json!({"part": "server", "client": client})),
        part(serde_json::json!({"part": "client", "server": victim, "cookie": 1})),
    ] {
        let (e, _) = attack(
            &lab,
            &agent,
            TestSpec::Ping(ping.clone()),
            Some(part.clone()),
        );
        assert!(
            names_allow(&e, "third-party", "third-party"),
            "{part:?}: {e}"
        );
    }
    assert!(!dir.path("started.log").exists(), "testpmd started");
}

#[test]
fn a_congestion_control_the_kernel_lacks_loads_no_module() {
    let Some(lab) = need_lab() else { return };
    let dir = Scratch::new("cc");
    let agent = agent(&lab, &dir, &[]);
    let spec = TestSpec::Stream(StreamSpec {
        congestion: Some("sonde_evil".into()),
        ..StreamSpec::default()
    });
    let (e, _) = attack(&lab, &agent, spec, None);
    assert!(e.contains("--congestion"), "{e}");
    assert!(e.contains("available: "), "the refusal lists what is: {e}");
    let modules = std::fs::read_to_string("/proc/modules").unwrap_or_default();
    assert!(!modules.contains("tcp_sonde_evil"), "module loaded");
    let log = run({
        let mut c = std::process::Command::new("dmesg");
        c.arg("--notime");
        c
    });
    assert!(
        !stdout(&log).contains("tcp_sonde_evil"),
        "the kernel looked for it"
    );
    // One the kernel offers is still taken.
    let offered =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").unwrap();
    let cc = offered.split_whitespace().next().unwrap().to_string();
    let mut ok = StreamSpec {
        congestion: Some(cc),
        ..StreamSpec::default()
    };
    ok.timing.duration_ms = 1_000;
    let to = agent_addr(&lab, &agent);
    let got = rogue(&lab.client, to, TestSpec::Stream(ok), None);
    assert!(got.is_ok(), "{got:?}");
}
