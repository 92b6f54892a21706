//! Two racks joined by a router: hosts 1..=n on bridge A (198.18.4.k, rack r1) and
//! n+1..=2n on bridge B (198.18.5.k, rack r2), the router at .254 of both; a mesh agent
//! (`sonde serve --mesh`) per host. Every namespace, and the hosts files of a DNS peer
//! list (/etc/netns/NS/hosts), is deleted on drop, also when the test fails.

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sonde_run::netns::{self, Namespace};

use super::{ip, netns_prefix, skip_unless, Agent, Lab, Serial, NEXT, SONDE};

/// Every agent's reflector and metrics port.
pub const STAMP_PORT: &str = "8620";
pub const METRICS_PORT: &str = "9464";

pub struct MeshLab {
    /// Host k (from 1) at index k-1.
    pub hosts: Vec<String>,
    pub router: String,
    /// The router's interface toward rack r2's bridge: where a fault is planted.
    pub router_to_b: String,
    /// The router's interface toward rack r1's bridge (where r1's packets to r2 come in).
    pub router_to_a: String,
    per_rack: usize,
    made: std::cell::RefCell<Vec<Namespace>>,
    etc: std::cell::RefCell<Vec<std::path::PathBuf>>,
    _serial: Serial,
}

impl MeshLab {
    /// `per_rack` hosts on each of two bridges, or `None` (skip).
    pub fn new(per_rack: usize) -> Option<MeshLab> {
        if !super::need_tools(&["ip"]) {
            return None;
        }
        let tag = format!(
            "m{}x{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let pre = netns_prefix();
        let lab = MeshLab {
            hosts: (1..=2 * per_rack)
                .map(|k| format!("{pre}-{tag}-h{k}"))
                .collect(),
            router: format!("{pre}-{tag}-r"),
            router_to_b: format!("v{tag}rb"),
            router_to_a: format!("v{tag}ra"),
            per_rack,
            made: Default::default(),
            etc: Default::default(),
            _serial: Serial::take(),
        };
        let built = lab.build(&pre, &tag);
        skip_unless("root and network namespaces", built.err()).then_some(lab)
    }

    fn add(&self, name: &str) -> Result<(), String> {
        let ns = Namespace::add(name).map_err(|e| e.to_string())?;
        self.made.borrow_mut().push(ns);
        Ok(())
    }

    fn build(&self, pre: &str, tag: &str) -> Result<(), String> {
        self.add(&self.router)?;
        let r = &self.router;
        for (rack, subnet) in [("a", 4), ("b", 5)] {
            let br = format!("{pre}-{tag}-br{rack}");
            self.add(&br)?;
            ip(&["-n", &br, "link", "add", "br0", "type", "bridge"])?;
            ip(&["-n", &br, "link", "set", "br0", "up"])?;
            let rif = if rack == "b" {
                self.router_to_b.clone()
            } else {
                self.router_to_a.clone()
            };
            self.plug(&br, r, &rif, &format!("198.18.{subnet}.254/24"))?;
            let first = if rack == "a" { 1 } else { self.per_rack + 1 };
            for k in first..first + self.per_rack {
                let ns = &self.hosts[k - 1];
                self.add(ns)?;
                let dev = format!("v{tag}h{k}");
                self.plug(
                    &br,
                    ns,
                    &dev,
                    &format!("{}/24", Self::addr(k, self.per_rack)),
                )?;
                ip(&[
                    "-n",
                    ns,
                    "route",
                    "add",
                    "default",
                    "via",
                    &format!("198.18.{subnet}.254"),
                ])?;
            }
        }
        let o = Lab::in_ns(r, "sysctl")
            .args(["-qw", "net.ipv4.ip_forward=1"])
            .output();
        match o {
            Ok(o) if o.status.success() => Ok(()),
            _ => Err("cannot enable forwarding in the router".into()),
        }
    }

    /// A veth from `ns` (as `dev`, with `cidr`) to bridge namespace `br`.
    fn plug(&self, br: &str, ns: &str, dev: &str, cidr: &str) -> Result<(), String> {
        let port = format!("{dev}p");
        netns::veth(ns, dev, br, &port).map_err(|e| e.to_string())?;
        ip(&["-n", br, "link", "set", &port, "master", "br0"])?;
        ip(&["-n", br, "link", "set", &port, "up"])?;
        ip(&["-n", ns, "addr", "add", cidr, "dev", dev])?;
        ip(&["-n", ns, "link", "set", dev, "up"])
    }

    /// Host k's address (rack r1: 198.18.4.k, rack r2: 198.18.5.(k - per_rack)).
    pub fn addr(k: usize, per_rack: usize) -> String {
        if k <= per_rack {
            format!("198.18.4.{k}")
        } else {
            format!("198.18.5.{}", k - per_rack)
        }
    }

    pub fn host_addr(&self, k: usize) -> String {
        Self::addr(k, self.per_rack)
    }

    pub fn rack(&self, k: usize) -> &'static str {
        if k <= self.per_rack {
            "r1"
        } else {
            "r2"
        }
    }

    /// Makes NAME resolve, inside host k's namespace, to every host's address (as a
    /// headless Service's DNS does): /etc/netns/NS/hosts, removed on drop.
    pub fn hosts_file(&self, k: usize, name: &str) {
        let dir = std::path::PathBuf::from("/etc/netns").join(&self.hosts[k - 1]);
        std::fs::create_dir_all(&dir).unwrap();
        self.etc.borrow_mut().push(dir.clone());
        let text: String = (1..=self.hosts.len())
            .map(|j| format!("{} {name}\n", self.host_addr(j)))
            .collect();
        std::fs::write(dir.join("hosts"), text).unwrap();
    }

    /// `sonde serve --mesh SOURCE` on host k, labelled by its node, rack and zone, plus
    /// `extra`.
    pub fn start_agent(&self, k: usize, source: &str, extra: &[&str]) -> Agent {
        self.start_agent_with(k, source, extra, &[])
    }

    /// As [`start_agent`](Self::start_agent), with `env` added to its environment.
    pub fn start_agent_with(
        &self,
        k: usize,
        source: &str,
        extra: &[&str],
        env: &[(&str, String)],
    ) -> Agent {
        let addr = self.host_addr(k);
        let mut cmd = Lab::in_ns(&self.hosts[k - 1], SONDE);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        cmd.args(["serve", "--bind", &addr, "--port", "5301", "--mesh", source])
            .args([
                "--mesh-port",
                STAMP_PORT,
                "--metrics",
                &format!("{addr}:{METRICS_PORT}"),
            ])
            .args([
                "--label",
                &format!("node=h{k}"),
                "--label",
                &format!("rack={}", self.rack(k)),
            ])
            .args(["--label", "zone=z1"])
            .args(extra);
        Agent::start(cmd)
    }

    /// `program` in the router's namespace.
    /// Host k's own /metrics, read inside its namespace.
    pub fn scrape(&self, k: usize) -> String {
        let url = format!("http://{}:{METRICS_PORT}/metrics", self.host_addr(k));
        let script = "import sys, urllib.request\nprint(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())";
        let out = Lab::in_ns(&self.hosts[k - 1], "python3")
            .args(["-c", script, &url])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn in_router(&self, program: &str) -> Command {
        Lab::in_ns(&self.router, program)
    }
}

impl Drop for MeshLab {
    fn drop(&mut self) {
        for dir in self.etc.borrow().iter() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// `family{...destination="dst"...}`'s value in `text`, if such a series is there.
pub fn series(text: &str, family: &str, dst: &str, extra: &str) -> Option<f64> {
    let want = format!("destination=\"{dst}\"");
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .find(|l| l.contains(&want) && l.contains(extra))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Polls `done` every 300 ms until it holds; past `limit`, fails naming `what` and its last
/// error.
pub fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> Result<(), String>) {
    let began = Instant::now();
    loop {
        match done() {
            Ok(()) => return,
            Err(e) if began.elapsed() > limit => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(300)),
        }
    }
}
