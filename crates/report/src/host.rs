//! `sonde host` for people: the machine as published reports open with it.

use std::fmt::{Result, Write};

use sonde_results::inventory::{cpu_list as list, Inventory, Nic};

pub fn render(inv: &Inventory) -> String {
    let mut o = String::new();
    write_host(&mut o, inv).expect("writing to a String cannot fail");
    o
}

fn or(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "n/a".into())
}

fn or_na<T: ToString>(v: Option<T>) -> String {
    v.map_or("n/a".into(), |v| v.to_string())
}

fn write_host(o: &mut String, inv: &Inventory) -> Result {
    writeln!(o, "kernel        {}", or(&inv.kernel))?;
    writeln!(o, "hypervisor    {}", or(&inv.hypervisor))?;
    if let Some(s) = inv.steal_since_boot_percent {
        writeln!(o, "  steal since boot  {s:.2} % of all CPUs' time")?;
    }
    writeln!(o, "clocksource   {}", or(&inv.clocksource))?;
    if let Some(c) = &inv.clock {
        for line in crate::clock::render(c)
            .lines()
            .filter(|l| !l.starts_with("clocksource"))
        {
            writeln!(o, "  {line}")?;
        }
    }
    write_cpu(o, inv)?;
    for n in &inv.nics {
        write_nic(o, n)?;
    }
    writeln!(o, "\nsysctls")?;
    for (k, v) in &inv.sysctls {
        writeln!(o, "  {k} = {v}")?;
    }
    if !inv.recommendations.is_empty() {
        writeln!(o, "\nrecommendations")?;
        for r in &inv.recommendations {
            write!(o, "  [{}] {}: {}", r.rule, r.observed, r.advice)?;
            if let Some(c) = &r.command {
                write!(o, "\n      {c}")?;
            }
            writeln!(o)?;
        }
    }
    Ok(())
}

/// The CPU as lscpu summarises it: model, layout, NUMA nodes, caches, idle states.
fn write_cpu(o: &mut String, inv: &Inventory) -> Result {
    let c = &inv.cpu;
    writeln!(
        o,
        "CPU           {} — {} CPUs ({}), {} socket(s), {} cores, {} thread(s) per core",
        or(&c.model),
        c.online.len(),
        list(&c.online),
        c.sockets,
        c.cores,
        c.threads_per_core
    )?;
    if let Some(m) = c.max_mhz {
        writeln!(
            o,
            "frequency     max {m:.0} MHz, governor {}",
            or(&c.governor)
        )?;
    }
    for n in &c.numa_nodes {
        let memory = n
            .memory_kib
            .map(|m| format!(", {:.1} GiB", m as f64 / 1048576.0));
        let memory = memory.unwrap_or_default();
        writeln!(o, "NUMA node {}   CPUs {}{memory}", n.node, list(&n.cpus))?;
    }
    for k in &c.caches {
        let (level, kind) = (k.level, &k.kind);
        writeln!(
            o,
            "cache L{level} {kind:<11} {} KiB x {}",
            k.size_kib, k.instances
        )?;
    }
    if !c.idle_states.is_empty() {
        let states: Vec<String> = c
            .idle_states
            .iter()
            .map(|s| {
                let disabled = if s.disabled { " (disabled)" } else { "" };
                format!("{} {} us{disabled}", s.name, s.exit_latency_us)
            })
            .collect();
        writeln!(o, "idle states   {}", states.join(", "))?;
    }
    Ok(())
}

/// One NIC: identity, queues and rings, offloads, RSS, XDP, its IRQs and their CPUs.
fn write_nic(o: &mut String, n: &Nic) -> Result {
    let version = n.driver_version.as_ref().map(|v| format!(" {v}"));
    writeln!(
        o,
        "\nNIC {}: driver {}{}, bus {}, NUMA node {}, MAC {}, MTU {}, speed {}, {}",
        n.name,
        or(&n.driver),
        version.unwrap_or_default(),
        or(&n.bus_address),
        or_na(n.numa_node),
        or(&n.mac),
        or_na(n.mtu),
        or_na(n.speed_mbit.map(|v| format!("{v} Mbit/s"))),
        or(&n.operstate)
    )?;
    write!(o, "  queues      {} rx, {} tx", n.rx_queues, n.tx_queues)?;
    if let Some(ch) = n.channels {
        let max = (ch.max_rx, ch.max_tx, ch.max_combined);
        write!(
            o,
            "; channels rx {} tx {} combined {}",
            ch.rx, ch.tx, ch.combined
        )?;
        write!(o, " (max {} / {} / {})", max.0, max.1, max.2)?;
    }
    if let Some(r) = n.rings {
        let (max_rx, max_tx) = (r.max_rx, r.max_tx);
        write!(
            o,
            "; rings rx {} tx {} (max {max_rx} / {max_tx})",
            r.rx, r.tx
        )?;
    }
    writeln!(o)?;
    if !n.offloads.is_empty() {
        let on: Vec<String> = n
            .offloads
            .iter()
            .map(|(k, v)| format!("{k} {}", if *v { "on" } else { "off" }))
            .collect();
        writeln!(o, "  offloads    {}", on.join(", "))?;
    }
    if let Some(r) = n.rss {
        let entries = r.indirection_entries;
        writeln!(
            o,
            "  RSS         {}-byte key, {entries} indirection entries",
            r.key_bytes
        )?;
    }
    if let Some(x) = n.native_xdp {
        let says = if x {
            "yes, in the driver"
        } else {
            "no (generic mode only: after the kernel has built the packet)"
        };
        writeln!(o, "  native XDP  {says}")?;
    }
    if let Some(zc) = n.xdp_zero_copy {
        let says = if zc {
            "zero-copy (the driver shares its rings)"
        } else {
            "copy mode only (frames copied to and from the socket)"
        };
        writeln!(o, "  AF_XDP      {says}")?;
    }
    for i in &n.irqs {
        let cpus = i.affinity.as_deref().map(list);
        let cpus = cpus.unwrap_or_else(|| "n/a".into());
        writeln!(o, "  IRQ {:<8} {:<24} CPUs {cpus}", i.irq, i.name)?;
    }
    if let Some(vf) = &n.accelerated_networking_vf {
        writeln!(o, "  accelerated networking: yes, VF {vf}")?;
    }
    if let Some(vdev) = n.dpdk_vdev() {
        let dev = vdev.trim_start_matches("--vdev=");
        writeln!(
            o,
            "  DPDK        sonde --dpdk-dev vdev:{dev}  (testpmd {vdev})"
        )?;
    }
    if let (Some(d), Some(g)) = (n.napi_defer_hard_irqs, n.gro_flush_timeout_ns) {
        writeln!(o, "  napi_defer_hard_irqs {d}, gro_flush_timeout {g} ns")?;
    }
    Ok(())
}
