//! A fleet with an agent-less STAMP endpoint: a routed lab (`Lab::routed`) whose server
//! namespace is the "router" running stamp-suite's reflector (no sonde there), agent a1
//! in the client namespace, and two more namespaces hung off the router: agent a2 and
//! the controller. Both agents' paths to the reflector cross the router's delay line.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use sonde_run::netns::{self, Namespace};

use super::{ip, skip_unless, Agent, Lab, SpawnKeeping, SONDE};

/// The reflector's UDP port.
pub const STAMP_PORT: &str = "8620";
/// Agent a2's and the controller's addresses, each on a /24 of its own behind the router.
pub const A2_ADDR: &str = "198.18.5.1";
pub const CONTROLLER_ADDR: &str = "198.18.6.1";

/// stamp-suite's executable, or a skip (a failure with CI=true).
pub fn stamp_suite() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin/stamp-suite"));
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("stamp-suite"))
            .find(|p| p.is_file())
    });
    let found = on_path.or(home.filter(|h| h.is_file()));
    let missing = found
        .is_none()
        .then(|| "not installed (cargo install stamp-suite)".to_string());
    skip_unless("stamp-suite", missing).then_some(found?)
}

/// One nftables table `inet NAME` in `ns` with a chain on `hook` and `rule` in it.
pub fn plant(ns: &str, name: &str, hook: &str, rule: &[&str]) {
    let nft = |args: &[&str]| {
        let out = Lab::in_ns(ns, "nft").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "nft {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let _ = Lab::in_ns(ns, "nft")
        .args(["delete", "table", "inet", name])
        .output();
    nft(&["add", "table", "inet", name]);
    let chain = format!("{{ type filter hook {hook} priority 0 ; }}");
    nft(&["add", "chain", "inet", name, "c", &chain]);
    let mut args = vec!["add", "rule", "inet", name, "c"];
    args.extend_from_slice(rule);
    nft(&args);
}

/// stamp-suite as a stateful reflector on `addr`:STAMP_PORT in `ns`, killed on drop.
pub struct SuiteReflector(Child);

impl SuiteReflector {
    pub fn start(ns: &str, addr: &str, exe: &Path) -> SuiteReflector {
        SuiteReflector::keyed(ns, addr, exe, None)
    }

    /// The same, authenticated (HMAC-SHA256) under `key_hex` when given.
    pub fn keyed(ns: &str, addr: &str, exe: &Path, key_hex: Option<&str>) -> SuiteReflector {
        let mut cmd = Lab::in_ns(ns, exe.to_str().unwrap());
        cmd.args(["-i", "-S", addr, "-o", STAMP_PORT, "--stateful-reflector"]);
        if let Some(key) = key_hex {
            cmd.args(["-A", "A", "--hmac-key", key]);
        }
        let r = SuiteReflector(cmd.spawn_keeping(super::Keep::Nothing));
        wait_listening(ns);
        r
    }
}

impl Drop for SuiteReflector {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until a UDP socket listens on STAMP_PORT in `ns` (at most 5 s).
fn wait_listening(ns: &str) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        let out = Lab::in_ns(ns, "ss").args(["-Huln"]).output().unwrap();
        if String::from_utf8_lossy(&out.stdout).contains(&format!(":{STAMP_PORT} ")) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listens on UDP {STAMP_PORT} in {ns}");
}

/// The two namespaces added to a routed lab (a2, the controller), deleted on drop.
pub struct Spurs {
    pub a2: String,
    pub controller: String,
    /// The router's interface toward a2, for its delay-line rule.
    pub a2_router_if: String,
    _made: Vec<Namespace>,
}

impl Spurs {
    /// Hangs a2 (A2_ADDR) and the controller (CONTROLLER_ADDR) off `lab`'s router.
    pub fn add(lab: &Lab) -> Option<Spurs> {
        let r = Spurs::build(lab);
        let missing = r.as_ref().err().cloned();
        skip_unless("root and network namespaces", missing).then(|| r.ok())?
    }

    fn build(lab: &Lab) -> Result<Spurs, String> {
        let (router, _) = lab.router.clone().expect("a routed lab");
        let mut made = Vec::new();
        let mut names = Vec::new();
        for (tag, addr, net) in [
            ("a2", A2_ADDR, "198.18.5"),
            ("k", CONTROLLER_ADDR, "198.18.6"),
        ] {
            let ns = lab.client.replace("-c", &format!("-{tag}"));
            made.push(Namespace::add(&ns).map_err(|e| e.to_string())?);
            let (dev, peer) = (
                format!("{}{tag}", lab.client_if),
                format!("{}{tag}r", lab.client_if),
            );
            netns::veth(&ns, &dev, &router, &peer).map_err(|e| e.to_string())?;
            ip(&["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", &dev])?;
            ip(&["-n", &ns, "link", "set", &dev, "up"])?;
            ip(&[
                "-n",
                &ns,
                "route",
                "add",
                "default",
                "via",
                &format!("{net}.254"),
            ])?;
            let gw = format!("{net}.254/24");
            ip(&["-n", &router, "addr", "add", &gw, "dev", &peer])?;
            ip(&["-n", &router, "link", "set", &peer, "up"])?;
            names.push((ns, peer));
        }
        let (controller, _) = names.pop().expect("two");
        let (a2, a2_router_if) = names.pop().expect("two");
        Ok(Spurs {
            a2,
            controller,
            a2_router_if,
            _made: made,
        })
    }
}

/// A STAMP key file (0600) holding `hex`, as `--stamp-key-file` and
/// `--stamp-sender-key-file` read it.
pub fn stamp_key_file(name: &str, hex: &str) -> PathBuf {
    let path = super::temp_file(name);
    std::fs::write(&path, format!("{hex}\n")).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    path
}

/// `sonde serve` on `addr`:5301 in `ns`, sending STAMP within `targets` when asked.
pub fn stamp_agent(ns: &str, addr: &str, extra: &[&str]) -> Agent {
    let mut cmd = Lab::in_ns(ns, SONDE);
    cmd.args(["serve", "--bind", addr, "--port", "5301"])
        .args(extra);
    Agent::start(cmd)
}
