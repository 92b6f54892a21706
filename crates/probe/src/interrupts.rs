//! Interrupt counts from /proc/interrupts, and which IRQs belong to a network interface
//! (its device's `msi_irqs` in sysfs, or lines naming the interface).

use std::path::Path;

use crate::{parse_err, read, FormatError, ProbeError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrqLine {
    /// "38" for numbered IRQs, "NMI", "LOC" ... for the architecture's own.
    pub irq: String,
    pub per_cpu: Vec<u64>,
    /// Everything after the counts: chip, hardware IRQ and action names.
    pub description: String,
}

impl IrqLine {
    pub fn total(&self) -> u64 {
        self.per_cpu.iter().sum()
    }
}

pub fn read_interrupts(root: &Path) -> Result<Vec<IrqLine>, ProbeError> {
    let text = read(root, "proc/interrupts")?;
    parse(&text).map_err(|r| parse_err(root, "proc/interrupts", r))
}

pub fn parse(text: &str) -> Result<Vec<IrqLine>, FormatError> {
    let mut lines = text.lines();
    let header = lines
        .next()
        .ok_or_else(|| FormatError::missing("empty file"))?;
    let ncpu = header
        .split_ascii_whitespace()
        .filter(|c| c.starts_with("CPU"))
        .count();
    if ncpu == 0 {
        return Err(FormatError::missing("header names no CPU"));
    }
    let mut out = Vec::new();
    for line in lines {
        let Some((irq, rest)) = line.split_once(':') else {
            continue;
        };
        let mut rest = rest.trim_start();
        let mut per_cpu = Vec::with_capacity(ncpu);
        // Lines like ERR and MIS carry one count, not one per CPU.
        while per_cpu.len() < ncpu {
            let end = rest
                .find(|c: char| c.is_ascii_whitespace())
                .unwrap_or(rest.len());
            match rest[..end].parse::<u64>() {
                Ok(v) => per_cpu.push(v),
                Err(_) => break,
            }
            rest = rest[end..].trim_start();
        }
        if per_cpu.is_empty() {
            return Err(FormatError::field(
                format!("IRQ {}", irq.trim()),
                "no counts",
            ));
        }
        out.push(IrqLine {
            irq: irq.trim().to_string(),
            per_cpu,
            description: rest.trim().to_string(),
        });
    }
    Ok(out)
}

/// IRQ numbers of a network interface: MSI vectors of its device (or of the PCI function
/// above a virtio device), else the lines whose action names the interface. Empty for
/// virtual devices (veth, loopback), which take no interrupts.
pub fn irqs_of(root: &Path, iface: &str, lines: &[IrqLine]) -> Vec<String> {
    let dev = root.join("sys/class/net").join(iface).join("device");
    for dir in [dev.join("msi_irqs"), dev.join("../msi_irqs")] {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            let mut irqs: Vec<String> = entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect();
            irqs.sort_by_key(|s| s.parse::<u64>().unwrap_or(u64::MAX));
            if !irqs.is_empty() {
                return irqs;
            }
        }
    }
    lines
        .iter()
        .filter(|l| {
            l.description
                .split(|c: char| c.is_ascii_whitespace() || c == ',')
                .any(|w| w == iface || w.starts_with(&format!("{iface}-")))
        })
        .map(|l| l.irq.clone())
        .collect()
}

/// Sum of the given IRQs' counts over all CPUs.
pub fn total_of(lines: &[IrqLine], irqs: &[String]) -> u64 {
    lines
        .iter()
        .filter(|l| irqs.contains(&l.irq))
        .map(IrqLine::total)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn parses_captured_vm_and_finds_virtio_net_irqs() {
        let root = fixture("vm-2cpu-virtio");
        let lines = read_interrupts(&root).unwrap();
        let irq38 = lines.iter().find(|l| l.irq == "38").unwrap();
        assert_eq!(irq38.per_cpu, vec![0, 399]);
        assert!(irq38.description.ends_with("virtio2-input.0"));
        let loc = lines.iter().find(|l| l.irq == "LOC").unwrap();
        assert_eq!(loc.per_cpu.len(), 2);
        // eth0 is virtio2 on PCI 0000:00:03.0, whose MSI vectors are 37..=39.
        let irqs = irqs_of(&root, "eth0", &lines);
        assert_eq!(irqs, vec!["37", "38", "39"]);
        assert_eq!(total_of(&lines, &irqs), 399 + 323);
        assert!(irqs_of(&root, "lo", &lines).is_empty());
    }

    #[test]
    fn names_match_multiqueue_nics() {
        let text = "           CPU0       CPU1\n\
            120:  5  7  IR-PCI-MSI 1-edge  ens5-TxRx-0\n\
            121:  1  2  IR-PCI-MSI 2-edge  ens5-TxRx-1\n\
            122:  9  9  IR-PCI-MSI 3-edge  ens50-TxRx-0\n\
            ERR:  0\n";
        let lines = parse(text).unwrap();
        assert_eq!(lines.len(), 4);
        let irqs = irqs_of(Path::new("/nonexistent"), "ens5", &lines);
        assert_eq!(irqs, vec!["120", "121"]);
        assert_eq!(total_of(&lines, &irqs), 15);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse("").is_err());
        assert!(parse("nothing here\n").is_err());
        assert!(parse("  CPU0\n 1: x y\n").is_err());
    }
}
