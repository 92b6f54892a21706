//! The environment section: each host as `lscpu` shows it, its CPU layout as DPDK's
//! cpu-layout tool shows it (physical cores, their hyperthreads, their NUMA node), and its
//! NICs with driver, queues and accelerated networking. Both ends on one host: shown once.

use sonde_results::inventory::{cpu_list, Inventory};
use sonde_results::{Document, HostInfo};

use crate::table::Table;

/// The hosts of a run: (which end, host), once when both ends shared a kernel.
fn hosts(doc: &Document) -> Vec<(&'static str, &HostInfo)> {
    let c = &doc.start.client;
    match &doc.start.server {
        Some(s) if s.boot_id.is_some() && s.boot_id == c.boot_id => vec![("both ends", c)],
        Some(s) => vec![("client", c), ("server", s)],
        None => vec![("client", c)],
    }
}

/// A cache size as lscpu writes it: `32 KiB`, `1 MiB`.
fn kib(k: u64) -> String {
    if k >= 1024 && k.is_multiple_of(1024) {
        format!("{} MiB", k / 1024)
    } else {
        format!("{k} KiB")
    }
}

fn or_na(v: Option<String>) -> String {
    v.unwrap_or_else(|| "n/a".into())
}

/// lscpu's rows, one column per host.
fn lscpu(hosts: &[(&str, &HostInfo)]) -> Table {
    let head: Vec<String> = std::iter::once("".to_string())
        .chain(
            hosts
                .iter()
                .map(|(end, h)| format!("{} ({end})", h.hostname)),
        )
        .collect();
    let mut t = Table {
        caption: "CPU and kernel, as lscpu reports them.".into(),
        head,
        rows: Vec::new(),
    };
    type Field = fn(&HostInfo, Option<&Inventory>) -> Option<String>;
    let rows: [(&str, Field); 12] = [
        ("Model name", |h, i| {
            h.cpu_model.clone().or(i?.cpu.model.clone())
        }),
        ("CPU(s)", |h, i| {
            Some(i.map_or(h.cpus_online?, |i| i.cpu.online.len()).to_string())
        }),
        ("On-line CPU(s) list", |_, i| Some(cpu_list(&i?.cpu.online))),
        ("Socket(s)", |_, i| Some(i?.cpu.sockets.to_string())),
        ("Core(s) per socket", |_, i| {
            let c = &i?.cpu;
            Some((c.cores / c.sockets.max(1)).to_string())
        }),
        ("Thread(s) per core", |_, i| {
            Some(i?.cpu.threads_per_core.to_string())
        }),
        ("NUMA node(s)", |_, i| {
            Some(i?.cpu.numa_nodes.len().to_string())
        }),
        ("CPU max MHz", |_, i| {
            i?.cpu.max_mhz.map(|m| format!("{m:.0}"))
        }),
        ("Hypervisor", |_, i| i?.hypervisor.clone()),
        ("Steal since boot", |_, i| {
            i?.steal_since_boot_percent.map(|s| format!("{s:.2} %"))
        }),
        ("Kernel", |h, i| h.kernel.clone().or(i?.kernel.clone())),
        ("Clock source", |_, i| i?.clocksource.clone()),
    ];
    for (name, f) in rows {
        let mut row = vec![name.to_string()];
        row.extend(
            hosts
                .iter()
                .map(|(_, h)| or_na(f(h, h.inventory.as_deref()))),
        );
        t.row(row);
    }
    let nodes: std::collections::BTreeSet<usize> = hosts
        .iter()
        .flat_map(|(_, h)| {
            h.inventory
                .iter()
                .flat_map(|i| i.cpu.numa_nodes.iter().map(|n| n.node))
        })
        .collect();
    for node in nodes {
        let mut row = vec![format!("NUMA node{node} CPU(s)")];
        row.extend(hosts.iter().map(|(_, h)| {
            let n = h
                .inventory
                .as_ref()
                .and_then(|i| i.cpu.numa_nodes.iter().find(|n| n.node == node));
            n.map_or_else(|| "n/a".into(), |n| cpu_list(&n.cpus))
        }));
        t.row(row);
    }
    let levels: std::collections::BTreeSet<(u32, String)> = hosts
        .iter()
        .flat_map(|(_, h)| {
            h.inventory
                .iter()
                .flat_map(|i| i.cpu.caches.iter().map(|c| (c.level, c.kind.clone())))
        })
        .collect();
    for (level, kind) in levels {
        let short = match kind.as_str() {
            "Data" => "d",
            "Instruction" => "i",
            _ => "",
        };
        let mut row = vec![format!("L{level}{short} cache")];
        row.extend(hosts.iter().map(|(_, h)| {
            let c = h.inventory.as_ref().and_then(|i| {
                i.cpu
                    .caches
                    .iter()
                    .find(|c| c.level == level && c.kind == kind)
            });
            c.map_or_else(
                || "n/a".into(),
                |c| {
                    format!(
                        "{} ({} instance{})",
                        kib(c.size_kib),
                        c.instances,
                        if c.instances == 1 { "" } else { "s" }
                    )
                },
            )
        }));
        t.row(row);
    }
    t
}

/// DPDK cpu-layout's view of one host: each physical core, its CPUs, its NUMA node.
fn cpu_layout(end: &str, h: &HostInfo) -> Option<Table> {
    let cpu = &h.inventory.as_ref()?.cpu;
    let mut t = Table::new(
        format!(
            "CPU layout of {} ({end}): physical cores and their hyperthreads.",
            h.hostname
        ),
        &["Core", "CPUs", "NUMA node"],
    );
    for (core, cpus) in cpu.cores_cpus.iter().enumerate() {
        let node = cpus
            .first()
            .and_then(|c| cpu.numa_nodes.iter().find(|n| n.cpus.contains(c)))
            .map_or_else(|| "n/a".into(), |n| n.node.to_string());
        t.row(vec![
            format!("Core {core}"),
            format!(
                "[{}]",
                cpus.iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            node,
        ]);
    }
    (!t.is_empty()).then_some(t)
}

/// Every host's NICs: driver, speed, queues, XDP, the accelerated-networking VF.
fn nics(hosts: &[(&str, &HostInfo)]) -> Table {
    let mut t = Table::new(
        "Network interfaces, as sonde host reads them from sysfs and ethtool.",
        &[
            "Host",
            "Interface",
            "Driver",
            "Speed Mbit/s",
            "MTU",
            "Queues RX/TX",
            "Combined channels",
            "Ring RX/TX",
            "NUMA node",
            "Native XDP",
            "Accelerated networking",
        ],
    );
    for (_, h) in hosts {
        for n in h.inventory.iter().flat_map(|i| i.nics.iter()) {
            let opt = |v: Option<String>| or_na(v);
            t.row(vec![
                h.hostname.clone(),
                n.name.clone(),
                opt(n.driver.clone()),
                opt(n.speed_mbit.map(|s| crate::units::thousands(s as i64))),
                opt(n.mtu.map(|m| m.to_string())),
                format!("{}/{}", n.rx_queues, n.tx_queues),
                opt(n
                    .channels
                    .as_ref()
                    .map(|c| format!("{} of {}", c.combined, c.max_combined))),
                opt(n.rings.as_ref().map(|r| format!("{}/{}", r.rx, r.tx))),
                opt(n.numa_node.map(|n| n.to_string())),
                opt(n
                    .native_xdp
                    .map(|x| if x { "yes" } else { "no" }.to_string())),
                n.accelerated_networking_vf
                    .as_ref()
                    .map_or_else(|| "no VF".into(), |v| format!("VF {v}")),
            ]);
        }
    }
    t
}

/// The environment of `doc`'s hosts, as tables.
pub fn tables(doc: &Document) -> Vec<Table> {
    let hosts = hosts(doc);
    let mut out = vec![lscpu(&hosts)];
    out.extend(hosts.iter().filter_map(|(end, h)| cpu_layout(end, h)));
    let nics = nics(&hosts);
    if !nics.is_empty() {
        out.push(nics);
    }
    out
}
