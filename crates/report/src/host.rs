//! `sonde host` for people: the machine as published reports open with it.

use sonde_results::inventory::{cpu_list as list, Inventory};

pub fn render(inv: &Inventory) -> String {
    let c = &inv.cpu;
    let mut o = String::new();
    let or = |v: &Option<String>| v.clone().unwrap_or_else(|| "n/a".into());
    o.push_str(&format!(
        "kernel        {}\nhypervisor    {}\nclocksource   {}\n",
        or(&inv.kernel),
        or(&inv.hypervisor),
        or(&inv.clocksource)
    ));
    o.push_str(&format!(
        "CPU           {} — {} CPUs ({}), {} socket(s), {} cores, {} thread(s) per core\n",
        or(&c.model),
        c.online.len(),
        list(&c.online),
        c.sockets,
        c.cores,
        c.threads_per_core
    ));
    if let Some(m) = c.max_mhz {
        o.push_str(&format!(
            "frequency     max {m:.0} MHz, governor {}\n",
            or(&c.governor)
        ));
    }
    for n in &c.numa_nodes {
        o.push_str(&format!(
            "NUMA node {}   CPUs {}{}\n",
            n.node,
            list(&n.cpus),
            n.memory_kib
                .map(|m| format!(", {:.1} GiB", m as f64 / 1048576.0))
                .unwrap_or_default()
        ));
    }
    for k in &c.caches {
        o.push_str(&format!(
            "cache L{} {:<11} {} KiB x {}\n",
            k.level, k.kind, k.size_kib, k.instances
        ));
    }
    if !c.idle_states.is_empty() {
        let s: Vec<String> = c
            .idle_states
            .iter()
            .map(|s| {
                format!(
                    "{} {} us{}",
                    s.name,
                    s.exit_latency_us,
                    if s.disabled { " (disabled)" } else { "" }
                )
            })
            .collect();
        o.push_str(&format!("idle states   {}\n", s.join(", ")));
    }
    for n in &inv.nics {
        o.push_str(&format!(
            "\nNIC {}: driver {}{}, bus {}, NUMA node {}, MAC {}, MTU {}, speed {}, {}\n",
            n.name,
            or(&n.driver),
            n.driver_version
                .as_ref()
                .map(|v| format!(" {v}"))
                .unwrap_or_default(),
            or(&n.bus_address),
            n.numa_node.map_or("n/a".into(), |v| v.to_string()),
            or(&n.mac),
            n.mtu.map_or("n/a".into(), |v| v.to_string()),
            n.speed_mbit.map_or("n/a".into(), |v| format!("{v} Mbit/s")),
            or(&n.operstate)
        ));
        o.push_str(&format!(
            "  queues      {} rx, {} tx",
            n.rx_queues, n.tx_queues
        ));
        if let Some(ch) = n.channels {
            o.push_str(&format!(
                "; channels rx {} tx {} combined {} (max {} / {} / {})",
                ch.rx, ch.tx, ch.combined, ch.max_rx, ch.max_tx, ch.max_combined
            ));
        }
        if let Some(r) = n.rings {
            o.push_str(&format!(
                "; rings rx {} tx {} (max {} / {})",
                r.rx, r.tx, r.max_rx, r.max_tx
            ));
        }
        o.push('\n');
        if !n.offloads.is_empty() {
            let on: Vec<String> = n
                .offloads
                .iter()
                .map(|(k, v)| format!("{k} {}", if *v { "on" } else { "off" }))
                .collect();
            o.push_str(&format!("  offloads    {}\n", on.join(", ")));
        }
        if let Some(r) = n.rss {
            o.push_str(&format!(
                "  RSS         {}-byte key, {} indirection entries\n",
                r.key_bytes, r.indirection_entries
            ));
        }
        if let Some(x) = n.native_xdp {
            o.push_str(&format!(
                "  native XDP  {}\n",
                if x {
                    "driver supports it"
                } else {
                    "not a driver known to support it"
                }
            ));
        }
        for i in &n.irqs {
            o.push_str(&format!(
                "  IRQ {:<8} {:<24} CPUs {}\n",
                i.irq,
                i.name,
                i.affinity
                    .as_deref()
                    .map(list)
                    .unwrap_or_else(|| "n/a".into())
            ));
        }
        if let Some(vf) = &n.accelerated_networking_vf {
            o.push_str(&format!("  accelerated networking: yes, VF {vf}\n"));
        }
        if let (Some(d), Some(g)) = (n.napi_defer_hard_irqs, n.gro_flush_timeout_ns) {
            o.push_str(&format!(
                "  napi_defer_hard_irqs {d}, gro_flush_timeout {g} ns\n"
            ));
        }
    }
    o.push_str("\nsysctls\n");
    for (k, v) in &inv.sysctls {
        o.push_str(&format!("  {k} = {v}\n"));
    }
    if !inv.recommendations.is_empty() {
        o.push_str("\nrecommendations\n");
        for r in &inv.recommendations {
            o.push_str(&format!("  [{}] {}: {}", r.rule, r.observed, r.advice));
            if let Some(c) = &r.command {
                o.push_str(&format!("\n      {c}"));
            }
            o.push('\n');
        }
    }
    o
}
