//! UDP socket drop counters from /proc/net/udp and /proc/net/udp6: the `drops` column of
//! every socket bound to a port (a SO_REUSEPORT group shares it).

use std::path::Path;

use crate::{parse_err, read, FormatError, ProbeError};

/// Sum of the `drops` column of the sockets whose local port is `port`.
pub fn drops_on_port(root: &Path, port: u16) -> Result<u64, ProbeError> {
    let mut total = 0;
    for rel in ["proc/net/udp", "proc/net/udp6"] {
        let text = match read(root, rel) {
            Ok(t) => t,
            // No IPv6 in this namespace or kernel: nothing to add.
            Err(_) if rel.ends_with('6') => continue,
            Err(e) => return Err(e),
        };
        total += parse_drops(&text, port).map_err(|r| parse_err(root, rel, r))?;
    }
    Ok(total)
}

pub fn parse_drops(text: &str, port: u16) -> Result<u64, FormatError> {
    let mut total = 0;
    for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.len() < 13 {
            return Err(FormatError::Line {
                what: "short line",
                line: line.to_string(),
            });
        }
        let local_port = f[1]
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            .ok_or_else(|| FormatError::missing(format!("bad local address {}", f[1])))?;
        if local_port == port {
            total += f[f.len() - 1]
                .parse::<u64>()
                .map_err(|e| FormatError::field("drops", e))?;
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn captured_vm_without_udp_sockets_or_udp6() {
        // The capture holds the header only, and the tree has no udp6 file: zero drops,
        // not an error. Without /proc/net/udp it is an error naming the file.
        let root = fixture("vm-2cpu-virtio");
        let text = std::fs::read_to_string(root.join("proc/net/udp")).unwrap();
        assert_eq!(text.lines().count(), 1);
        assert!(!root.join("proc/net/udp6").exists());
        assert_eq!(drops_on_port(&root, 1).unwrap(), 0);
        let err = drops_on_port(&fixture("smt-4cpu"), 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("proc/net/udp"), "{err}");
    }

    #[test]
    fn sums_a_reuseport_group() {
        let text = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
             1: 020012C6:9C40 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 100 2 0000000000000000 17\n\
             2: 020012C6:9C40 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 101 2 0000000000000000 25\n\
             3: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000   101        0 102 2 0000000000000000 9\n";
        assert_eq!(parse_drops(text, 0x9C40).unwrap(), 42);
        assert_eq!(parse_drops(text, 53).unwrap(), 9);
        assert_eq!(parse_drops(text, 1).unwrap(), 0);
        assert!(parse_drops("h\n 1: x\n", 1).is_err());
    }
}
