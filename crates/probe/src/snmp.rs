//! TCP counters from /proc/net/snmp (per network namespace). The file pairs a header line
//! of names with a line of values for each protocol.

use std::path::Path;

use crate::{parse_err, read, FormatError, ProbeError};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpCounters {
    pub retrans_segs: u64,
    pub out_segs: u64,
    pub in_segs: u64,
}

pub fn read_tcp(root: &Path) -> Result<TcpCounters, ProbeError> {
    let text = read(root, "proc/net/snmp")?;
    parse_tcp(&text).map_err(|r| parse_err(root, "proc/net/snmp", r))
}

pub fn parse_tcp(text: &str) -> Result<TcpCounters, FormatError> {
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = match (tcp.next(), tcp.next()) {
        (Some(n), Some(v)) => (n, v),
        _ => return Err(FormatError::missing("no Tcp: header and value lines")),
    };
    let get = |key: &str| -> Result<u64, FormatError> {
        let pos = names
            .split_ascii_whitespace()
            .position(|n| n == key)
            .ok_or_else(|| FormatError::missing(format!("no Tcp field {key}")))?;
        values
            .split_ascii_whitespace()
            .nth(pos)
            .ok_or_else(|| FormatError::missing(format!("Tcp value line too short for {key}")))?
            .parse::<u64>()
            .map_err(|e| FormatError::field(format!("Tcp {key}"), e))
    };
    Ok(TcpCounters {
        retrans_segs: get("RetransSegs")?,
        out_segs: get("OutSegs")?,
        in_segs: get("InSegs")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn parses_captured_vm() {
        let t = read_tcp(&fixture("vm-2cpu-virtio")).unwrap();
        assert!(t.out_segs > 0 && t.in_segs > 0);
        assert_eq!(t, read_tcp(&fixture("vm-2cpu-virtio")).unwrap());
    }

    #[test]
    fn finds_fields_by_name() {
        let text = "Ip: A B\nIp: 1 2\nTcp: InSegs RetransSegs OutSegs\nTcp: 10 3 20\n";
        assert_eq!(
            parse_tcp(text).unwrap(),
            TcpCounters {
                retrans_segs: 3,
                out_segs: 20,
                in_segs: 10
            }
        );
        assert!(parse_tcp("Tcp: InSegs\n").is_err());
        assert!(parse_tcp("Tcp: InSegs RetransSegs OutSegs\nTcp: x 1 2\n").is_err());
    }
}
