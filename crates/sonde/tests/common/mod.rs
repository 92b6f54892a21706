//! Test harness: a two-namespace lab per test (deleted on drop, also when the test fails),
//! agents and controllers run as real processes of the built binary.

#![allow(dead_code)]

pub mod agent_proc;
pub mod bridge;
pub mod data_rogue;
pub mod delay_line;
pub mod h2_raw;
pub mod hwstamps;
pub mod iperf3_rogue;
pub mod key_files;
pub mod mesh_lab;
pub mod mesh_rogue;
pub mod metrics_monitor;
pub mod nft;
pub mod planted;
pub mod prometheus;
pub mod rogue;
pub mod rpm_end;
pub mod serial;
pub mod serve_proc;
pub mod shaped;
pub mod stages;
pub mod stamp_lab;
pub mod stamp_rogue;
pub mod steal;

pub use key_files::key_file;
pub use nft::{nft_counted, nft_named_counter};
pub use serial::Serial;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sonde_run::netns::{self, Namespace, Pair};

pub const SONDE: &str = env!("CARGO_BIN_EXE_sonde");
pub const CLIENT_ADDR: &str = "198.18.0.1";
pub const SERVER_ADDR: &str = "198.18.0.2";
/// The agent's address behind a router (`Lab::routed`).
pub const ROUTED_SERVER_ADDR: &str = "198.19.0.2";

pub(crate) static NEXT: AtomicU32 = AtomicU32::new(0);

/// A 1 s run after 0.1 s of warm-up, its document on stdout and not saved: the tail of
/// a short test's command line whose result a test reads.
pub const SHORT_JSON: [&str; 6] = ["-t", "1", "--warmup", "0.1", "--json", "--no-save"];
/// Half a second of requests over 2 connections after 0.2 s of warm-up: a short rpc.
pub const SHORT_RPC: [&str; 6] = ["-t", "0.5", "--warmup", "0.2", "-C", "2"];

/// `ip ARGS`, through the builder `sonde lab` uses too.
pub(crate) fn ip(args: &[&str]) -> Result<(), String> {
    netns::ip(args).map_err(|e| e.to_string())
}

/// Skips (prints `SKIPPED: needs WHAT` and returns false) when `missing` says why this
/// machine cannot run a test; with CI=true that fails the test instead: CI runs everything.
pub(crate) fn skip_unless(what: &str, missing: Option<String>) -> bool {
    let Some(why) = missing else { return true };
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("SKIPPED is a failure with CI=true: needs {what}: {why}");
    }
    // Straight to the stderr handle: the test harness captures eprintln! of passing tests.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: needs {what}: {why} (bash scripts/test.sh installs what the tests need)"
    );
    false
}

/// Whether `tool` is on PATH.
fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// True when this process may hold the CPU latency limit (root, /dev/cpu_dma_latency).
pub fn need_cpu_latency_device() -> bool {
    let open = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/cpu_dma_latency");
    skip_unless(
        "root and /dev/cpu_dma_latency",
        open.err().map(|e| e.to_string()),
    )
}

/// True when every tool is on PATH; otherwise skips naming the first one missing.
pub fn need_tools(tools: &[&str]) -> bool {
    tools
        .iter()
        .all(|t| skip_unless(t, (!on_path(t)).then(|| format!("{t} is not on PATH"))))
}

/// A TCP connection from `from` (an address this host holds, as a rogue or a second
/// controller would have it) to `to`.
pub fn connect_from(from: [u8; 4], to: std::net::SocketAddr) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    s.bind(&std::net::SocketAddr::from((from, 0)).into())?;
    s.connect(&to.into())?;
    Ok(s.into())
}

/// Two namespaces joined by a veth pair: client 198.18.0.1, server 198.18.0.2.
pub struct Lab {
    pub client: String,
    pub server: String,
    pub client_if: String,
    pub server_if: String,
    /// The agent's address: SERVER_ADDR, or ROUTED_SERVER_ADDR behind a router.
    pub server_addr: &'static str,
    /// `Lab::routed`: the router namespace and its interface toward the agent, where a
    /// shaper drops what it cannot pass without the sender feeling any back-pressure.
    pub router: Option<(String, String)>,
    /// The namespaces, deleted when dropped (the router's first).
    router_ns: Option<Namespace>,
    _pair: Pair,
    _serial: Serial,
}

impl Lab {
    /// A new lab, or `None` (skip) when this machine cannot make one. With CI=true a
    /// missing capability fails the test instead: CI must run everything. The lab holds
    /// the timing lock for its life: its tests do not overlap.
    pub fn new() -> Option<Lab> {
        Lab::needing(&[])
    }

    /// A new lab for a test that also runs `tools` (`nft`, ...), or `None` (skip).
    pub fn needing(tools: &[&str]) -> Option<Lab> {
        if !need_tools(&[&["ip"][..], tools].concat()) {
            return None;
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("t{}x{n}", std::process::id());
        let serial = Serial::take();
        let pair = Pair::create(&netns_prefix(), &tag, "v").map_err(|e| e.to_string());
        let pair = skip_unless("root and network namespaces", pair.as_ref().err().cloned())
            .then(|| pair.ok())
            .flatten()?;
        Some(Lab {
            client: pair.client.name().to_string(),
            server: pair.server.name().to_string(),
            client_if: pair.client_if.clone(),
            server_if: pair.server_if.clone(),
            server_addr: SERVER_ADDR,
            router: None,
            router_ns: None,
            _pair: pair,
            _serial: serial,
        })
    }

    /// Client, router, agent: 198.18.0.1 -> 198.18.0.254 | 198.19.0.254 -> 198.19.0.2.
    pub fn routed(tools: &[&str]) -> Option<Lab> {
        let mut lab = Lab::needing(tools)?;
        let router = lab.client.replace("-c", "-r");
        let (rc, rs) = (
            format!("{}rc", lab.client_if),
            format!("{}rs", lab.client_if),
        );
        lab.router = Some((router.clone(), rs.clone()));
        lab.server_addr = ROUTED_SERVER_ADDR;
        let built = lab.build_routed(&router, &rc, &rs);
        skip_unless("root and network namespaces", built.err()).then_some(lab)
    }

    /// Rebuilds the lab's pair as two links through a forwarding namespace.
    fn build_routed(&mut self, router: &str, rc: &str, rs: &str) -> Result<(), String> {
        self.router_ns = Some(Namespace::add(router).map_err(|e| e.to_string())?);
        ip(&["-n", &self.client, "link", "del", &self.client_if])?;
        for (ns, dev, peer) in [
            (&self.client, &self.client_if, rc),
            (&self.server, &self.server_if, rs),
        ] {
            netns::veth(ns, dev, router, peer).map_err(|e| e.to_string())?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", router, "link", "set", peer, "up"])?;
        }
        for (ns, dev, addr, via) in [
            (
                &self.client,
                &self.client_if,
                "198.18.0.1/24",
                "198.18.0.254",
            ),
            (
                &self.server,
                &self.server_if,
                "198.19.0.2/24",
                "198.19.0.254",
            ),
        ] {
            ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
            ip(&["-n", ns, "route", "add", "default", "via", via])?;
        }
        ip(&["-n", router, "addr", "add", "198.18.0.254/24", "dev", rc])?;
        ip(&["-n", router, "addr", "add", "198.19.0.254/24", "dev", rs])?;
        // net.ipv4.ip_forward is per namespace; written through the namespace's /proc.
        let out = Lab::in_ns(router, "sh")
            .args(["-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"])
            .output()
            .map_err(|e| format!("ip_forward: {e}"))?;
        out.status
            .success()
            .then_some(())
            .ok_or_else(|| format!("ip_forward: {}", String::from_utf8_lossy(&out.stderr)))
    }

    /// Runs a command in the router namespace of a routed lab.
    pub fn router_cmd(&self, program: &str, args: &[&str]) {
        let (router, _) = self.router.as_ref().expect("a routed lab");
        let out = Lab::in_ns(router, program).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A tbf shaper on the router's interface toward the agent, where what it cannot pass
    /// it drops and the sender feels nothing: `rate`, `burst` and `limit` in tc's units.
    pub fn router_tbf(&self, rate: &str, burst: &str, limit: &str) {
        let (_, toward_agent) = self.router.clone().expect("a routed lab");
        let qdisc = ["qdisc", "add", "dev", &toward_agent, "root", "tbf"];
        let shape = ["rate", rate, "burst", burst, "limit", limit];
        self.router_cmd("tc", &[&qdisc[..], &shape[..]].concat());
    }

    pub fn in_ns(ns: &str, program: &str) -> Command {
        let mut c = netns::exec_in(ns, program);
        c.env("SONDE_DB", scratch_db()).env(KEY_ENV, key_file());
        c
    }

    /// Runs `program` in namespace `ns`; its stdout, once it succeeded.
    fn in_ns_ok(ns: &str, program: &str, args: &[&str]) -> String {
        let out = Lab::in_ns(ns, program).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs a shell-free command inside the client namespace (tc, nft, ...).
    pub fn client_cmd(&self, program: &str, args: &[&str]) {
        Lab::in_ns_ok(&self.client, program, args);
    }

    pub fn start_agent(&self) -> Agent {
        self.start_agent_with(&[])
    }

    /// `sonde serve` in the server namespace with extra flags (`--allow dpdk`,
    /// `--test-hooks`, limits, ...).
    pub fn start_agent_with(&self, args: &[&str]) -> Agent {
        let mut cmd = Lab::in_ns(&self.server, SONDE);
        cmd.args(["serve", "--bind", self.server_addr, "--port", "0"])
            .args(args);
        Agent::start(cmd)
    }

    /// `sonde stream SERVER_ADDR --port P ARGS...` in the client namespace.
    pub fn stream(&self, agent: &Agent, args: &[&str]) -> Command {
        self.sonde(agent, "stream", args)
    }

    /// `sonde TEST SERVER_ADDR --port P ARGS...` in the client namespace.
    pub fn sonde(&self, agent: &Agent, test: &str, args: &[&str]) -> Command {
        let mut cmd = Lab::in_ns(&self.client, SONDE);
        cmd.args([test, self.server_addr, "--port", &agent.port.to_string()])
            .args(args);
        cmd
    }

    /// An nftables rule on the agent's input path, in a table of its own.
    pub fn server_nft_rule(&self, rule: &[&str]) {
        self.server_cmd("nft", &["add", "table", "inet", "sonde"]);
        self.server_cmd(
            "nft",
            &[
                "add",
                "chain",
                "inet",
                "sonde",
                "in",
                "{ type filter hook input priority 0 ; }",
            ],
        );
        let mut args = vec!["add", "rule", "inet", "sonde", "in"];
        args.extend_from_slice(rule);
        self.server_cmd("nft", &args);
    }

    /// An nftables rule on the TCP segments to `agent` that carry data (IP length over 100:
    /// not SYNs, bare ACKs or headers), other than its control connection's, ending in
    /// `action` (`counter`, or a share dropped).
    pub fn server_data_rule(&self, agent: &Agent, action: &[&str]) {
        let port = agent.port.to_string();
        let mut rule = vec![
            "ip",
            "daddr",
            SERVER_ADDR,
            "tcp",
            "dport",
            "!=",
            &port,
            "ip",
            "length",
            ">",
            "100",
        ];
        rule.extend_from_slice(action);
        self.server_nft_rule(&rule);
    }

    /// Packets counted by the `counter` of the rule added with `server_nft_rule`.
    pub fn server_nft_count(&self) -> u64 {
        let rules = self.server_cmd("nft", &["-j", "list", "table", "inet", "sonde"]);
        let v: serde_json::Value = serde_json::from_str(&rules).unwrap();
        v["nftables"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|x| {
                x["rule"]["expr"]
                    .as_array()?
                    .iter()
                    .find_map(|e| e["counter"]["packets"].as_u64())
            })
            .expect("an nftables counter")
    }

    /// Runs a command in the server namespace and returns its stdout.
    pub fn server_cmd(&self, program: &str, args: &[&str]) -> String {
        Lab::in_ns_ok(&self.server, program, args)
    }

    /// The agent's interface's own count of packets received.
    pub fn server_rx_packets(&self) -> u64 {
        let path = format!("/sys/class/net/{}/statistics/rx_packets", self.server_if);
        self.server_cmd("cat", &[&path]).trim().parse().unwrap()
    }
}

/// A running agent process; killed on drop.
pub struct Agent {
    pub child: Child,
    pub port: u16,
    /// Loopback agents hold the timing lock (lab agents run under their lab's).
    _serial: Option<Serial>,
}

impl Agent {
    pub fn start(mut cmd: Command) -> Agent {
        let mut child = cmd.spawn_keeping(Keep::Stdout);
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .rsplit_once(':')
            .unwrap()
            .1
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        Agent {
            child,
            port,
            _serial: None,
        }
    }

    pub fn on_loopback() -> Agent {
        Agent::on_loopback_with(&[])
    }

    /// `sonde serve` on 127.0.0.1 with extra flags (`--key-file`, limits, ...).
    pub fn on_loopback_with(args: &[&str]) -> Agent {
        let serial = Serial::take();
        let mut cmd = sonde_cmd();
        cmd.args(["serve", "--bind", "127.0.0.1", "--port", "0"])
            .args(args);
        let mut agent = Agent::start(cmd);
        agent._serial = Some(serial);
        agent
    }

    /// `TEST 127.0.0.1 --port P -t SECS --warmup 0.1 EXTRA...`: a short test against this
    /// loopback agent.
    pub fn short_test(&self, test: &str, secs: &str, extra: &[&str]) -> Vec<String> {
        let port = self.port.to_string();
        let head = [
            test,
            "127.0.0.1",
            "--port",
            &port,
            "-t",
            secs,
            "--warmup",
            "0.1",
        ];
        head.iter().chain(extra).map(|s| s.to_string()).collect()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What the names of the namespaces a test makes start with: `sonde`, or
/// SONDE_TEST_NETNS_PREFIX, so that people sharing a machine can tell theirs apart.
pub fn netns_prefix() -> String {
    std::env::var("SONDE_TEST_NETNS_PREFIX").unwrap_or_else(|_| "sonde".into())
}

/// This test process's scratch directory (0700): every store and file a test makes lives
/// here, and the whole directory is removed when the test process exits (an `atexit`
/// hook: statics are never dropped), so tests leave no key files or stores in /tmp.
fn scratch_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    extern "C" fn remove_scratch_dir() {
        if let Some(d) = DIR.get() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
    DIR.get_or_init(|| {
        use std::os::unix::fs::DirBuilderExt;
        let d = std::env::temp_dir().join(format!("sonde-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d); // a dead process's, with our recycled pid
        std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
        // SAFETY: registers a plain function that only reads a set OnceLock.
        unsafe { libc::atexit(remove_scratch_dir) };
        d
    })
}

/// This test process's result store: tests never write into the user's default one.
pub fn scratch_db() -> PathBuf {
    scratch_dir().join("results.db")
}

/// The built `sonde`, saving runs (unless told otherwise) into `scratch_db()`, with this
/// test process's key (agents off loopback need one, and controllers prove it).
pub fn sonde_cmd() -> Command {
    let mut c = Command::new(SONDE);
    c.env("SONDE_DB", scratch_db()).env(KEY_ENV, key_file());
    c
}

/// The variable that gives every sonde command its key file.
pub const KEY_ENV: &str = "SONDE_KEY_FILE";

/// A fresh path in this process's scratch directory (removed when the process exits).
pub fn temp_file(name: &str) -> PathBuf {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    scratch_dir().join(format!("{n}-{name}"))
}

pub fn read_doc(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// `sonde ARGS` saving its runs into the store `db`.
pub fn sonde_into<S: AsRef<std::ffi::OsStr>>(db: &Path, args: &[S]) -> Output {
    let mut c = sonde_cmd();
    c.args(args).env("SONDE_DB", db);
    run(c)
}

/// What a test process started in the background keeps of its output (stdin is closed).
#[derive(Clone, Copy)]
pub enum Keep {
    Nothing,
    Stdout,
    Both,
}

pub trait SpawnKeeping {
    /// Starts the command with stdin closed and only `keep` of its output piped.
    fn spawn_keeping(&mut self, keep: Keep) -> Child;
}

impl SpawnKeeping for Command {
    fn spawn_keeping(&mut self, keep: Keep) -> Child {
        let piped = |yes: bool| if yes { Stdio::piped() } else { Stdio::null() };
        self.stdin(Stdio::null())
            .stdout(piped(!matches!(keep, Keep::Nothing)))
            .stderr(piped(matches!(keep, Keep::Both)))
            .spawn()
            .unwrap()
    }
}

pub fn run(mut cmd: Command) -> Output {
    cmd.stdin(Stdio::null()).output().unwrap()
}

/// The document a successful `--json` run printed; fails with its output otherwise.
pub fn doc_of(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}{}", stdout(o), stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn wait_with_timeout(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t = std::time::Instant::now();
    while t.elapsed() < limit {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// The real-time clock as an NTP timestamp: what a STAMP sender stamps its packets with
/// (an authenticated reflector answers only packets stamped near its own clock).
pub fn ntp_now() -> sonde_proto::stamp::Timestamp {
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    sonde_proto::stamp::Timestamp::from_unix_ns(ns, sonde_proto::stamp::TimeFormat::Ntp)
}

/// `sonde stamp TARGET --json --no-save ARGS` in namespace `ns`, which must succeed; its
/// document.
pub fn stamp_doc(ns: &str, target: &str, args: &[&str]) -> serde_json::Value {
    let mut cmd = Lab::in_ns(ns, SONDE);
    cmd.args(["stamp", target, "--json", "--no-save"])
        .args(args);
    let out = run(cmd);
    assert!(
        out.status.success(),
        "sonde stamp {args:?}: {}",
        stderr(&out)
    );
    doc_of(&out)
}
