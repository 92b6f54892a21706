//! Many hosts on one Ethernet: namespaces on a Linux bridge (in a namespace of its own),
//! host k at 198.18.2.k, a controller at 198.18.2.100; all deleted on drop.

use std::process::Command;

use std::sync::atomic::Ordering;

use sonde_run::netns::{self, Namespace};

use super::{ip, skip_unless, Agent, Lab, Serial, NEXT, SONDE};

pub const CONTROLLER_ADDR: &str = "198.18.2.100";
/// Every agent of a bridged lab listens on this port (each in its own namespace).
pub const FLEET_PORT: &str = "5301";

/// `--from A --to B --port 5301`: a client part from the agent at `a` to the one at `b`.
pub fn part<'a>(a: &'a str, b: &'a str) -> [&'a str; 6] {
    ["--from", a, "--to", b, "--port", FLEET_PORT]
}

pub struct Bridged {
    /// The hosts' namespaces, host k (from 1) at index k-1.
    pub hosts: Vec<String>,
    pub controller: String,
    /// The controller's interface, for its counters.
    pub controller_if: String,
    bridge: String,
    /// Every namespace made, deleted when dropped.
    made: std::cell::RefCell<Vec<Namespace>>,
    _serial: Serial,
}

impl Bridged {
    /// Two hosts whose second counts in nftables table `victim` the UDP the first sends
    /// it (and drops it, with `drop`): the lab and the two hosts' addresses, or `None`
    /// (skip) without nft or a lab.
    pub fn counting_udp(drop: bool) -> Option<(Bridged, String, String)> {
        let lab = Bridged::new(2)?;
        if !super::need_tools(&["nft"]) {
            return None;
        }
        let (a, b) = (Bridged::addr(1), Bridged::addr(2));
        let verdict = if drop { " drop" } else { "" };
        for rule in [
            "add table inet victim".to_string(),
            "add chain inet victim input { type filter hook input priority 0 ; }".into(),
            format!("add rule inet victim input ip saddr {a} ip daddr {b} meta l4proto udp counter{verdict}"),
        ] {
            let o = Lab::in_ns(&lab.hosts[1], "nft").arg(&rule).output().unwrap();
            assert!(o.status.success(), "nft {rule}: {}", super::stderr(&o));
        }
        Some((lab, a, b))
    }

    /// `n` hosts and a controller on one bridge, or `None` (skip) when this machine
    /// cannot make them.
    pub fn new(n: usize) -> Option<Bridged> {
        if !super::need_tools(&["ip"]) {
            return None;
        }
        let tag = format!(
            "b{}x{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let pre = super::netns_prefix();
        let lab = Bridged {
            hosts: (1..=n).map(|k| format!("{pre}-{tag}-h{k}")).collect(),
            controller: format!("{pre}-{tag}-c"),
            controller_if: format!("v{tag}c"),
            bridge: format!("{pre}-{tag}-br"),
            made: Default::default(),
            _serial: Serial::take(),
        };
        let built = lab.build();
        skip_unless("root and network namespaces", built.err()).then_some(lab)
    }

    /// Adds namespace `name`, kept until the lab drops.
    fn add(&self, name: &str) -> Result<(), String> {
        let ns = Namespace::add(name).map_err(|e| e.to_string())?;
        self.made.borrow_mut().push(ns);
        Ok(())
    }

    fn build(&self) -> Result<(), String> {
        self.add(&self.bridge)?;
        ip(&["-n", &self.bridge, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &self.bridge, "link", "set", "br0", "up"])?;
        let hosts = self.hosts.iter().enumerate().map(|(k, ns)| (ns, k + 1));
        for (ns, octet) in hosts.chain([(&self.controller, 100)]) {
            let dev = if ns == &self.controller {
                self.controller_if.clone()
            } else {
                format!("{}h{octet}", self.controller_if)
            };
            let port = format!("{dev}p");
            self.add(ns)?;
            netns::veth(ns, &dev, &self.bridge, &port).map_err(|e| e.to_string())?;
            ip(&["-n", &self.bridge, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &self.bridge, "link", "set", &port, "up"])?;
            let addr = format!("198.18.2.{octet}/24");
            ip(&["-n", ns, "addr", "add", &addr, "dev", &dev])?;
            ip(&["-n", ns, "link", "set", &dev, "up"])?;
        }
        Ok(())
    }

    /// Host k's address (from 1).
    pub fn addr(k: usize) -> String {
        format!("198.18.2.{k}")
    }

    /// `sonde serve` on host k, on FLEET_PORT, taking either part of a fleet's tests.
    pub fn start_agent(&self, k: usize) -> Agent {
        self.start_agent_with(k, &[])
    }

    /// As `start_agent`, with extra flags (`--label zone=a`, ...).
    pub fn start_agent_with(&self, k: usize, args: &[&str]) -> Agent {
        let mut cmd = Lab::in_ns(&self.hosts[k - 1], SONDE);
        cmd.args(["serve", "--bind", &Bridged::addr(k), "--port", FLEET_PORT])
            .args(["--allow", "third-party"])
            .args(args);
        Agent::start(cmd)
    }

    /// `sonde ARGS...` in the controller's namespace.
    pub fn controller(&self, args: &[&str]) -> Command {
        let mut cmd = Lab::in_ns(&self.controller, SONDE);
        cmd.args(args);
        cmd
    }

    /// Bytes the controller's interface sent so far.
    pub fn controller_tx_bytes(&self) -> u64 {
        let path = format!("/sys/class/net/{}/statistics/tx_bytes", self.controller_if);
        let out = Lab::in_ns(&self.controller, "cat")
            .arg(path)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }
}
