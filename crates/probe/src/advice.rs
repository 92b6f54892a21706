//! Recommendations from an inventory: each rule says what it observed, what to do, and the
//! command that does it. Pure: the same inventory always gives the same advice.

pub use sonde_results::inventory::cpu_list;
use sonde_results::inventory::{Inventory, Nic, Recommendation};
use sonde_results::side::STEAL_NAMED_PERCENT;

/// The NIC a test most likely uses: the VF of an accelerated pair, else the first one up.
pub fn test_nic(inv: &Inventory) -> Option<&Nic> {
    let vf = inv
        .nics
        .iter()
        .find_map(|n| n.accelerated_networking_vf.as_ref());
    vf.and_then(|v| inv.nics.iter().find(|n| &n.name == v))
        .or_else(|| {
            inv.nics
                .iter()
                .find(|n| n.operstate.as_deref() == Some("up") && n.driver.is_some())
        })
        .or_else(|| inv.nics.iter().find(|n| n.driver.is_some()))
}

pub fn recommend(inv: &Inventory) -> Vec<Recommendation> {
    let mut out = Vec::new();
    let c = &inv.cpu;
    let nic = test_nic(inv);
    // One worker per physical core, on the NIC's NUMA node when there is more than one.
    let node_cpus: Option<(i64, Vec<usize>)> = nic.and_then(|n| {
        let node = n.numa_node?;
        let cpus = c
            .numa_nodes
            .iter()
            .find(|x| x.node as i64 == node)?
            .cpus
            .clone();
        (c.numa_nodes.len() > 1).then_some((node, cpus))
    });
    if c.threads_per_core > 1 {
        let firsts: Vec<usize> = c
            .cores_cpus
            .iter()
            .filter_map(|s| s.first().copied())
            .filter(|cpu| node_cpus.as_ref().is_none_or(|(_, n)| n.contains(cpu)))
            .collect();
        out.push(Recommendation {
            rule: "one-worker-per-physical-core".into(),
            observed: format!(
                "{} threads per core: SMT siblings share a core's execution units",
                c.threads_per_core
            ),
            advice: "pin workers to one CPU of each physical core".into(),
            command: Some(format!("--cpus {}", cpu_list(&firsts))),
        });
    }
    if let (Some(n), Some((node, cpus))) = (nic, &node_cpus) {
        out.push(Recommendation {
            rule: "workers-on-nic-numa-node".into(),
            observed: format!(
                "{} sits on NUMA node {node} of {}",
                n.name,
                c.numa_nodes.len()
            ),
            advice: format!("run workers on node {node}'s CPUs to avoid cross-node memory traffic"),
            command: Some(format!("--cpus {}", cpu_list(cpus))),
        });
        let off: Vec<&str> = n
            .irqs
            .iter()
            .filter(|i| {
                i.affinity
                    .as_ref()
                    .is_some_and(|a| !a.iter().all(|x| cpus.contains(x)))
            })
            .map(|i| i.irq.as_str())
            .collect();
        if !off.is_empty() {
            out.push(Recommendation {
                rule: "irqs-on-nic-numa-node".into(),
                observed: format!(
                    "{} of {}'s {} IRQs may run outside node {node}",
                    off.len(),
                    n.name,
                    n.irqs.len()
                ),
                advice: format!("steer the test queues' interrupts to node {node}"),
                command: Some(format!(
                    "for i in {}; do echo {} > /proc/irq/$i/smp_affinity_list; done",
                    off.join(" "),
                    cpu_list(cpus)
                )),
            });
        }
    }
    if inv
        .sysctls
        .get("net.core.busy_poll")
        .is_some_and(|v| v == "0")
    {
        out.push(Recommendation {
            rule: "busy-poll-for-latency".into(),
            observed:
                "net.core.busy_poll and busy_read are 0: every receive waits for an interrupt"
                    .into(),
            advice: "for latency tests, let sockets busy-poll the device queue (costs CPU)".into(),
            command: Some("sysctl -w net.core.busy_poll=50 net.core.busy_read=50".into()),
        });
    }
    if let Some(deep) = c
        .idle_states
        .iter()
        .filter(|s| !s.disabled && s.exit_latency_us > 10)
        .max_by_key(|s| s.exit_latency_us)
    {
        out.push(Recommendation {
            rule: "shallow-c-states-for-latency".into(),
            observed: format!(
                "idle state {} is enabled with a {} us exit latency",
                deep.name, deep.exit_latency_us
            ),
            advice: "for latency tests, disable idle states deeper than 10 us".into(),
            command: Some("cpupower idle-set -D 10".into()),
        });
    }
    if let Some(n) = nic {
        if let Some(ch) = n.channels {
            let cpus = c.online.len() as u32;
            let want = cpus.min(ch.max_combined);
            if ch.combined > 0 && ch.combined < want {
                out.push(Recommendation {
                    rule: "channels-versus-cpus".into(),
                    observed: format!(
                        "{} uses {} combined channels of {} possible, with {cpus} CPUs",
                        n.name, ch.combined, ch.max_combined
                    ),
                    advice: "spread receive work over more queues".into(),
                    command: Some(format!("ethtool -L {} combined {want}", n.name)),
                });
            }
        }
    }
    if let Some(steal) = inv
        .steal_since_boot_percent
        .filter(|s| *s >= STEAL_NAMED_PERCENT)
    {
        out.push(Recommendation {
            rule: "hypervisor-steal".into(),
            observed: format!(
                "the hypervisor took {steal:.1} % of this VM's CPU time since boot (steal)"
            ),
            advice: "a burstable size out of CPU credits or a crowded host: figures measured here move with it (each test's CPU figures say how much); a size with dedicated vCPUs does not".into(),
            command: None,
        });
    }
    for n in inv.nics.iter().filter(|n| {
        n.driver.as_deref() == Some("hv_netvsc") && n.accelerated_networking_vf.is_none()
    }) {
        out.push(Recommendation {
            rule: "accelerated-networking".into(),
            observed: format!("{} is a synthetic NIC (hv_netvsc) with no SR-IOV VF of the same MAC", n.name),
            advice: "traffic takes the software path through the host; enable Accelerated Networking on the VM's NIC".into(),
            command: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;
    use crate::inventory::collect;

    #[test]
    fn cpu_lists_compress() {
        assert_eq!(cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(cpu_list(&[]), "");
    }

    #[test]
    fn e192_advice_names_node_0_and_one_cpu_per_core() {
        let inv = collect(&fixture("azure-e192-mana"));
        assert_eq!(test_nic(&inv).unwrap().name, "enP30832s1");
        let recs = recommend(&inv);
        let by = |rule: &str| {
            recs.iter()
                .find(|r| r.rule == rule)
                .unwrap_or_else(|| panic!("{rule}: {recs:?}"))
        };
        assert_eq!(
            by("one-worker-per-physical-core").command.as_deref(),
            Some("--cpus 0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,34,36,38,40,42,44,46")
        );
        assert_eq!(
            by("workers-on-nic-numa-node").command.as_deref(),
            Some("--cpus 0-47")
        );
        assert!(by("busy-poll-for-latency").observed.contains("busy_poll"));
        assert!(!recs.iter().any(|r| r.rule == "accelerated-networking"));
    }

    #[test]
    fn captured_vm_gets_no_numa_or_smt_advice() {
        let inv = collect(&fixture("vm-2cpu-virtio"));
        let recs = recommend(&inv);
        assert!(
            !recs.iter().any(|r| r.rule == "one-worker-per-physical-core"
                || r.rule == "workers-on-nic-numa-node"),
            "{recs:?}"
        );
        assert!(recs.iter().any(|r| r.rule == "busy-poll-for-latency"));
        // 8 ticks of steal in 52,352 since boot: 0.015 %, read and not advised on.
        let steal = inv.steal_since_boot_percent.unwrap();
        assert!((steal - 8.0 * 100.0 / 52_352.0).abs() < 1e-9, "{steal}");
        assert!(
            !recs.iter().any(|r| r.rule == "hypervisor-steal"),
            "{recs:?}"
        );
    }

    #[test]
    fn a_vm_the_hypervisor_took_one_percent_from_is_told_so() {
        let mut inv = collect(&fixture("vm-2cpu-virtio"));
        inv.steal_since_boot_percent = Some(7.46);
        let recs = recommend(&inv);
        let r = recs.iter().find(|r| r.rule == "hypervisor-steal").unwrap();
        assert_eq!(
            r.observed,
            "the hypervisor took 7.5 % of this VM's CPU time since boot (steal)"
        );
        inv.steal_since_boot_percent = Some(0.99);
        assert!(!recommend(&inv).iter().any(|r| r.rule == "hypervisor-steal"));
    }
}
