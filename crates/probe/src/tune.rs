//! Tune planning: the settings published tuning guides change (sysctls, per-device NAPI
//! settings, IRQ affinity, channel counts), planned for a goal from the host's inventory
//! and its files under a root. Pure: applying and restoring live in the run layer
//! (`sonde_run::tune`), which saves the previous values first.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sonde_results::inventory::{cpu_list, Inventory};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    Latency,
    Throughput,
}

/// A `--tune` word that names no goal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a goal (latency, throughput)")]
pub struct UnknownGoal(pub String);

impl std::str::FromStr for Goal {
    type Err = UnknownGoal;

    fn from_str(s: &str) -> Result<Goal, UnknownGoal> {
        match s {
            "latency" => Ok(Goal::Latency),
            "throughput" => Ok(Goal::Throughput),
            _ => Err(UnknownGoal(s.to_string())),
        }
    }
}

impl Goal {
    /// The goals' names, as `FromStr` reads them.
    pub const NAMES: [&'static str; 2] = ["latency", "throughput"];
}

/// Where a setting lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// A file under /proc/sys or /sys, relative to the root.
    File { path: String },
    /// Combined channels of a device (ethtool -L DEV combined N).
    Channels { dev: String },
}

/// One change: from what the host has now, to what the goal wants, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub target: Target,
    pub from: String,
    pub to: String,
    pub why: String,
}

impl Change {
    pub fn describe(&self) -> String {
        let what = match &self.target {
            Target::File { path } => path.clone(),
            Target::Channels { dev } => format!("{dev} combined channels"),
        };
        format!("{what}: {} -> {} ({})", self.from, self.to, self.why)
    }

    /// As [`Change::describe`], once put back: `X (was Y)`.
    pub fn describe_restored(&self) -> String {
        let (done, was) = (
            format!("{} -> {}", self.from, self.to),
            format!("{} (was {})", self.from, self.to),
        );
        self.describe().replacen(&done, &was, 1)
    }
}

fn read_value(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(root.join(rel))
        .ok()
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Whether a setting can be changed here: some sysctls are read-only inside a network
/// namespace (net.core.rmem_max shows 0444 outside the initial one).
fn writable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o222 != 0)
}

/// The changes `goal` needs on this running host, for `dev` or the test's likely NIC.
pub fn plan_live(goal: Goal, dev: Option<&str>) -> Vec<Change> {
    plan(Path::new("/"), &crate::inventory::collect_live(), goal, dev)
}

/// The changes `goal` needs on this host; settings already right, absent or read-only
/// here (global sysctls inside a network namespace) are left out.
pub fn plan(root: &Path, inv: &Inventory, goal: Goal, dev: Option<&str>) -> Vec<Change> {
    let mut want: Vec<(String, String, &str)> = Vec::new();
    // Limits this plan only ever raises (a host already above the target keeps its value).
    const CEILINGS: [&str; 5] = [
        "proc/sys/net/core/rmem_max",
        "proc/sys/net/core/wmem_max",
        "proc/sys/net/ipv4/tcp_rmem",
        "proc/sys/net/ipv4/tcp_wmem",
        "proc/sys/net/core/netdev_max_backlog",
    ];
    match goal {
        Goal::Latency => {
            want.push((
                "proc/sys/net/core/busy_poll".into(),
                "50".into(),
                "sockets busy-poll the device queue for 50 us",
            ));
            want.push((
                "proc/sys/net/core/busy_read".into(),
                "50".into(),
                "blocking reads busy-poll for 50 us",
            ));
        }
        Goal::Throughput => {
            want.push((
                "proc/sys/net/core/rmem_max".into(),
                "16777216".into(),
                "allow 16 MiB socket receive buffers",
            ));
            want.push((
                "proc/sys/net/core/wmem_max".into(),
                "16777216".into(),
                "allow 16 MiB socket send buffers",
            ));
            want.push((
                "proc/sys/net/ipv4/tcp_rmem".into(),
                "4096 131072 16777216".into(),
                "TCP receive autotuning up to 16 MiB",
            ));
            want.push((
                "proc/sys/net/ipv4/tcp_wmem".into(),
                "4096 16384 16777216".into(),
                "TCP send autotuning up to 16 MiB",
            ));
            want.push((
                "proc/sys/net/core/netdev_max_backlog".into(),
                "5000".into(),
                "a longer backlog for bursts",
            ));
        }
    }
    let nic = match dev {
        Some(d) => inv.nics.iter().find(|n| n.name == d),
        None => crate::advice::test_nic(inv),
    };
    if let Some(n) = nic {
        let base = format!("sys/class/net/{}", n.name);
        match goal {
            Goal::Latency => {
                // With busy polling, deferred interrupts let the poller find the work first.
                want.push((
                    format!("{base}/napi_defer_hard_irqs"),
                    "2".into(),
                    "defer interrupts while sockets busy-poll",
                ));
                want.push((
                    format!("{base}/gro_flush_timeout"),
                    "200000".into(),
                    "a 200 us GRO flush timer backs the deferral",
                ));
            }
            Goal::Throughput => {
                want.push((
                    format!("{base}/napi_defer_hard_irqs"),
                    "0".into(),
                    "interrupts as they come",
                ));
                want.push((
                    format!("{base}/gro_flush_timeout"),
                    "0".into(),
                    "no GRO flush timer",
                ));
            }
        }
        // IRQs of the test NIC onto its NUMA node, when the host has several.
        let cpus: Option<Vec<usize>> = n.numa_node.and_then(|node| {
            let c = inv
                .cpu
                .numa_nodes
                .iter()
                .find(|x| x.node as i64 == node)?
                .cpus
                .clone();
            (inv.cpu.numa_nodes.len() > 1).then_some(c)
        });
        if let Some(cpus) = cpus {
            for irq in &n.irqs {
                want.push((
                    format!("proc/irq/{}/smp_affinity_list", irq.irq),
                    cpu_list(&cpus),
                    "the NIC's interrupts on its NUMA node",
                ));
            }
        }
    }
    let mut out: Vec<Change> = want
        .into_iter()
        .filter_map(|(path, to, why)| {
            let from = read_value(root, &path)?;
            let to = if CEILINGS.contains(&path.as_str()) {
                never_lower(&from, &to)
            } else {
                to
            };
            (from != to && writable(&root.join(&path))).then(|| Change {
                target: Target::File { path },
                from,
                to,
                why: why.into(),
            })
        })
        .collect();
    if let (Some(n), Goal::Throughput) = (nic, goal) {
        if let Some(ch) = n.channels.filter(|c| c.max_combined > 0) {
            let want = (inv.cpu.online.len() as u32).min(ch.max_combined);
            if ch.combined != want {
                out.push(Change {
                    target: Target::Channels {
                        dev: n.name.clone(),
                    },
                    from: ch.combined.to_string(),
                    to: want.to_string(),
                    why: "one queue per CPU, up to the device's maximum".into(),
                });
            }
        }
    }
    out
}

/// `target` raised field by field to what is in force (`tcp_rmem`'s three values, or one
/// limit), so that a plan never lowers a setting already above what it recommends. A value
/// that does not parse as numbers is taken as the target.
fn never_lower(current: &str, target: &str) -> String {
    let nums =
        |s: &str| -> Option<Vec<u64>> { s.split_whitespace().map(|x| x.parse().ok()).collect() };
    match (nums(current), nums(target)) {
        (Some(c), Some(t)) if c.len() == t.len() => c
            .iter()
            .zip(&t)
            .map(|(c, t)| (*c).max(*t).to_string())
            .collect::<Vec<_>>()
            .join(" "),
        _ => target.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name)
    }

    #[test]
    fn latency_plan_on_the_e192_steers_nothing_it_cannot_read() {
        let root = fixture("azure-e192-mana");
        let inv = crate::inventory::collect(&root);
        let p = plan(&root, &inv, Goal::Latency, None);
        let paths: Vec<String> = p
            .iter()
            .map(|c| match &c.target {
                Target::File { path } => path.clone(),
                Target::Channels { dev } => dev.clone(),
            })
            .collect();
        assert!(
            paths.contains(&"proc/sys/net/core/busy_poll".to_string()),
            "{paths:?}"
        );
        assert!(p.iter().all(|c| c.from != c.to));
        // The fixture has no NAPI files for the VF: nothing planned that cannot be read back.
        assert!(!paths.iter().any(|x| x.contains("napi_defer")), "{paths:?}");
    }

    #[test]
    fn throughput_plan_on_the_captured_vm() {
        let root = fixture("vm-2cpu-virtio");
        let inv = crate::inventory::collect(&root);
        let p = plan(&root, &inv, Goal::Throughput, Some("eth0"));
        let to: Vec<(&str, &str)> = p
            .iter()
            .filter_map(|c| match &c.target {
                Target::File { path } => Some((path.as_str(), c.to.as_str())),
                _ => None,
            })
            .collect();
        assert!(
            to.contains(&("proc/sys/net/core/rmem_max", "16777216")),
            "{to:?}"
        );
        // Its tcp_rmem ceiling (32 MiB) is already above the plan's 16 MiB: left alone.
        assert!(!to.iter().any(|(p, _)| p.ends_with("tcp_rmem")), "{to:?}");
        // gro_flush_timeout is already 0 there: not a change.
        assert!(
            !to.iter().any(|(p, _)| p.ends_with("gro_flush_timeout")),
            "{to:?}"
        );
    }

    fn copy_tree(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                copy_tree(&e.path(), &to.join(e.file_name()));
            } else if e.file_type().unwrap().is_symlink() {
                let target = std::fs::read_link(e.path()).unwrap();
                std::os::unix::fs::symlink(target, to.join(e.file_name())).unwrap();
            } else {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    }

    #[test]
    fn a_plan_never_lowers_a_limit_already_above_its_target() {
        // Each ceiling set above the plan's target on a scratch copy of the VM tree.
        let dir = std::env::temp_dir().join(format!("sonde-tune-high-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        copy_tree(&fixture("vm-2cpu-virtio"), &dir);
        let high = [
            ("proc/sys/net/core/rmem_max", "67108864"),
            ("proc/sys/net/core/wmem_max", "33554432"),
            ("proc/sys/net/ipv4/tcp_rmem", "4096 131072 33554432"),
            ("proc/sys/net/ipv4/tcp_wmem", "8192 65536 33554432"),
            ("proc/sys/net/core/netdev_max_backlog", "10000"),
        ];
        for (path, v) in high {
            std::fs::write(dir.join(path), format!("{v}\n")).unwrap();
        }
        let inv = crate::inventory::collect(&dir);
        let p = plan(&dir, &inv, Goal::Throughput, Some("eth0"));
        for (path, _) in high {
            assert!(
                !p.iter()
                    .any(|c| matches!(&c.target, Target::File { path: x } if x == path)),
                "{path} is above the target and must be left alone: {p:?}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn never_lower_raises_field_by_field() {
        assert_eq!(
            never_lower("4096 87380 6291456", "4096 131072 16777216"),
            "4096 131072 16777216"
        );
        assert_eq!(
            never_lower("4096 131072 33554432", "4096 131072 16777216"),
            "4096 131072 33554432"
        );
        assert_eq!(
            never_lower("8192 16384 4194304", "4096 16384 16777216"),
            "8192 16384 16777216"
        );
        assert_eq!(never_lower("212992", "16777216"), "16777216");
        assert_eq!(never_lower("1000", "5000"), "5000");
        assert_eq!(never_lower("20000", "5000"), "20000");
        assert_eq!(never_lower("garbage", "5000"), "5000");
    }
}
