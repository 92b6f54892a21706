//! NIC counters from /sys/class/net/IFACE/statistics (monotonic; deltas over a window).

use std::path::Path;

use sonde_results::NicCounters;

use crate::{parse_err, read, FormatError, ProbeError};

pub fn read_counters(root: &Path, iface: &str) -> Result<NicCounters, ProbeError> {
    if iface.is_empty() || iface.contains('/') || iface.starts_with('.') {
        return Err(parse_err(
            root,
            "sys/class/net",
            FormatError::missing(format!("bad interface name '{iface}'")),
        ));
    }
    let get = |name: &str| -> Result<u64, ProbeError> {
        let rel = format!("sys/class/net/{iface}/statistics/{name}");
        read(root, &rel)?
            .trim()
            .parse()
            .map_err(|e| parse_err(root, &rel, e))
    };
    Ok(NicCounters {
        iface: iface.to_string(),
        rx_packets: get("rx_packets")?,
        tx_packets: get("tx_packets")?,
        rx_bytes: get("rx_bytes")?,
        tx_bytes: get("tx_bytes")?,
        rx_dropped: get("rx_dropped")?,
        tx_dropped: get("tx_dropped")?,
    })
}

/// `after - before`, field by field.
/// The interface's receive and transmit queue counts (its `queues/rx-N`, `tx-N`).
pub fn queues(root: &Path, iface: &str) -> Result<(u32, u32), ProbeError> {
    let dir = root.join(format!("sys/class/net/{iface}/queues"));
    let entries = std::fs::read_dir(&dir).map_err(|source| ProbeError::Read {
        path: dir.clone(),
        source,
    })?;
    let (mut rx, mut tx) = (0, 0);
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        rx += u32::from(name.starts_with("rx-"));
        tx += u32::from(name.starts_with("tx-"));
    }
    Ok((rx, tx))
}

pub fn delta(before: &NicCounters, after: &NicCounters) -> NicCounters {
    NicCounters {
        iface: after.iface.clone(),
        rx_packets: after.rx_packets.saturating_sub(before.rx_packets),
        tx_packets: after.tx_packets.saturating_sub(before.tx_packets),
        rx_bytes: after.rx_bytes.saturating_sub(before.rx_bytes),
        tx_bytes: after.tx_bytes.saturating_sub(before.tx_bytes),
        rx_dropped: after.rx_dropped.saturating_sub(before.rx_dropped),
        tx_dropped: after.tx_dropped.saturating_sub(before.tx_dropped),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn reads_captured_vm() {
        let root = fixture("vm-2cpu-virtio");
        let eth0 = read_counters(&root, "eth0").unwrap();
        assert!(eth0.rx_packets > 0 && eth0.tx_bytes > 0);
        let veth = read_counters(&root, "veth-lab0").unwrap();
        assert_eq!(veth.iface, "veth-lab0");
        let d = delta(
            &eth0,
            &NicCounters {
                rx_packets: eth0.rx_packets + 5,
                ..eth0.clone()
            },
        );
        assert_eq!(d.rx_packets, 5);
        assert_eq!(d.tx_bytes, 0);
    }

    #[test]
    fn captured_vm_queue_counts() {
        let root = fixture("vm-2cpu-virtio");
        assert_eq!(queues(&root, "eth0").unwrap(), (1, 1));
        assert!(queues(&root, "eth9").is_err());
    }

    #[test]
    fn missing_or_bad_interface_is_an_error() {
        let root = fixture("vm-2cpu-virtio");
        let err = read_counters(&root, "nope0").unwrap_err().to_string();
        assert!(err.contains("nope0/statistics/rx_packets"), "{err}");
        assert!(read_counters(&root, "../x").is_err());
    }
}
