//! Automatic CPU placement (`--cpus auto`, the default): workers on distinct physical cores of the test
//! NIC's NUMA node first, away from the CPUs that take the NIC's interrupts when enough
//! cores remain, and only on CPUs this process may use (its inherited mask: taskset,
//! cgroups). The controller fills the list from its first cores, the agent from its last,
//! so that both ends of a test on one host (the lab) do not share a core.

use std::collections::BTreeSet;

use sonde_results::inventory::Inventory;

use crate::advice::test_nic;

/// Which end of the preference order to take cores from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    First,
    Last,
}

/// One CPU per worker, each on its own physical core; `None` when the workers outnumber the
/// usable cores: pinning several workers per core only takes balancing away from the
/// scheduler (measured: 8 streams pinned over 2 cores ran 20 % slower than unpinned).
pub fn choose(inv: &Inventory, allowed: &[usize], workers: usize, end: Pick) -> Option<Vec<usize>> {
    let allowed: BTreeSet<usize> = allowed.iter().copied().collect();
    let nic = test_nic(inv);
    let node_cpus: Option<BTreeSet<usize>> = nic.and_then(|n| {
        let node = n.numa_node?;
        Some(
            inv.cpu
                .numa_nodes
                .iter()
                .find(|x| x.node as i64 == node)?
                .cpus
                .iter()
                .copied()
                .collect(),
        )
    });
    let irq_cpus: BTreeSet<usize> = nic
        .map(|n| {
            n.irqs
                .iter()
                .filter_map(|i| i.affinity.clone())
                .flatten()
                .collect()
        })
        .unwrap_or_default();
    // (on the NIC's node, free of its IRQs) ranks first; then core order.
    let mut cores: Vec<(bool, bool, usize)> = inv
        .cpu
        .cores_cpus
        .iter()
        .filter_map(|siblings| {
            let cpu = siblings.iter().copied().find(|c| allowed.contains(c))?;
            let on_node = node_cpus.as_ref().is_none_or(|n| n.contains(&cpu));
            let irq_free = !siblings.iter().any(|c| irq_cpus.contains(c));
            Some((on_node, irq_free, cpu))
        })
        .collect();
    if cores.is_empty() {
        // No topology to go by: the allowed CPUs themselves.
        cores = allowed.iter().map(|&c| (true, true, c)).collect();
    }
    // IRQ-free cores first; the IRQ CPUs are used only once those run out.
    cores.sort_by_key(|&(on_node, irq_free, cpu)| (!on_node, !irq_free, cpu));
    if end == Pick::Last {
        // The agent takes from the same order's far end of the preferred group.
        let preferred = cores.iter().filter(|c| c.0).count().clamp(1, cores.len());
        cores[..preferred].reverse();
    }
    if workers.max(1) > cores.len() {
        return None;
    }
    Some(cores[..workers.max(1)].iter().map(|c| c.2).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;
    use crate::inventory::collect;

    #[test]
    fn e192_places_on_node_0_one_cpu_per_core() {
        let inv = collect(&fixture("azure-e192-mana"));
        let all: Vec<usize> = (0..192).collect();
        let c = choose(&inv, &all, 8, Pick::First).unwrap();
        assert_eq!(c, vec![0, 2, 4, 6, 8, 10, 12, 14]);
        let s = choose(&inv, &all, 4, Pick::Last).unwrap();
        assert_eq!(s, vec![46, 44, 42, 40]);
        // More workers than node 0 has cores: node 0 first, then the other nodes.
        let many = choose(&inv, &all, 30, Pick::First).unwrap();
        assert!(many[..24].iter().all(|&c| c < 48 && c % 2 == 0));
        assert_eq!(many[24], 48);
        assert!(
            choose(&inv, &all, 97, Pick::First).is_none(),
            "96 cores, 97 workers"
        );
    }

    #[test]
    fn the_inherited_mask_is_respected() {
        let inv = collect(&fixture("azure-e192-mana"));
        let mask: Vec<usize> = (100..104).collect();
        assert_eq!(choose(&inv, &mask, 2, Pick::First), Some(vec![100, 102]));
        assert_eq!(choose(&inv, &mask, 3, Pick::First), None);
    }

    #[test]
    fn irq_cpus_are_avoided_when_cores_suffice() {
        let mut inv = collect(&fixture("vm-2cpu-virtio"));
        // The captured NIC's IRQs may run on both CPUs: nothing to avoid, order kept.
        assert_eq!(choose(&inv, &[0, 1], 2, Pick::First), Some(vec![0, 1]));
        assert_eq!(choose(&inv, &[0, 1], 1, Pick::Last), Some(vec![1]));
        let eth0 = inv.nics.iter_mut().find(|n| n.name == "eth0").unwrap();
        for irq in &mut eth0.irqs {
            irq.affinity = Some(vec![0]);
        }
        eth0.operstate = Some("up".into());
        assert_eq!(choose(&inv, &[0, 1], 1, Pick::First), Some(vec![1]));
        // Two workers need both cores: CPU 0 is used after all.
        assert_eq!(choose(&inv, &[0, 1], 2, Pick::First), Some(vec![1, 0]));
    }
}
