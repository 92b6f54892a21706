//! One dpdk-testpmd command line: the EAL part (lcores, device, memory) and testpmd's own
//! part (forwarding mode, queues, descriptors, the packets txonly builds), as the published
//! DPDK reports write them by hand. Pure: the run layer decides, this only spells it.

use std::net::Ipv4Addr;
use std::path::PathBuf;

/// Bytes of hugepage memory one mbuf of testpmd's pool takes: 2176 bytes of data room, the
/// mbuf header and the mempool's per-object header, rounded up.
const MBUF_BYTES: u64 = 2560;
/// The same in ordinary 4 KiB pages, which an object may not straddle (measured: 10,240
/// more mbufs need 40 MiB more `-m`).
const MBUF_BYTES_PLAIN: u64 = 4096;
/// Memory EAL and ethdev take besides the mbuf pool (measured: 14 MiB with hugepages,
/// 16 MiB without), with headroom.
const FIXED_BYTES: u64 = 24 << 20;
/// testpmd's per-lcore mempool cache (its `--mbcache` default).
const MBUF_CACHE: u64 = 250;

/// The device testpmd drives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    /// A PCI device bound to a DPDK-capable driver (vfio-pci, or a bifurcated one).
    Pci(String),
    /// A virtual device: `net_af_packet0,iface=eth1`, or MANA's `<bus>,mac=<MAC>`.
    Vdev(String),
}

/// A `--dpdk-dev` word that names no device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is neither a PCI address (0000:3b:00.0) nor a virtual device (net_af_packet0,iface=eth1 or --vdev=...)")]
pub struct NotADevice(pub String);

impl Device {
    /// Reads `--dpdk-dev`: `--vdev=X`, `vdev:X` or a `net_*` name is a virtual device; a
    /// PCI address (`0000:3b:00.0`, `3b:00.0`, optionally `,devargs`) is a PCI device.
    pub fn parse(s: &str) -> Result<Device, NotADevice> {
        let s = s.trim();
        if let Some(v) = s
            .strip_prefix("--vdev=")
            .or_else(|| s.strip_prefix("vdev:"))
        {
            return Ok(Device::Vdev(v.to_string()));
        }
        if s.starts_with("net_") {
            return Ok(Device::Vdev(s.to_string()));
        }
        if is_pci_address(s.split(',').next().unwrap_or("")) {
            return Ok(Device::Pci(s.to_string()));
        }
        Err(NotADevice(s.to_string()))
    }

    /// The device as given: a PCI address with its devargs, or the vdev string.
    pub fn name(&self) -> &str {
        match self {
            Device::Pci(s) | Device::Vdev(s) => s,
        }
    }

    /// The PCI address of a PCI device, without its devargs.
    pub fn pci_address(&self) -> Option<&str> {
        match self {
            Device::Pci(s) => s.split(',').next(),
            Device::Vdev(_) => None,
        }
    }

    fn eal_args(&self) -> Vec<String> {
        match self {
            Device::Pci(a) => vec!["-a".into(), a.clone()],
            // A net_* vdev needs no PCI bus; scanning it would probe every NIC of the host.
            Device::Vdev(v) if v.starts_with("net_") => {
                vec![format!("--vdev={v}"), "--no-pci".into()]
            }
            Device::Vdev(v) => vec![format!("--vdev={v}")],
        }
    }
}

/// `dddd:bb:dd.f` or `bb:dd.f`, hexadecimal.
fn is_pci_address(s: &str) -> bool {
    let parts: Vec<&str> = s.split([':', '.']).collect();
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    match parts.as_slice() {
        [d, b, dev, f] => hex(d, 4) && hex(b, 2) && hex(dev, 2) && hex(f, 1),
        [b, dev, f] => hex(b, 2) && hex(dev, 2) && hex(f, 1),
        _ => false,
    }
}

/// What the txonly side puts in every packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxPackets {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
    /// The next hop's MAC (`--eth-peer`).
    pub peer_mac: [u8; 6],
    /// Frame bytes without FCS (`--txpkts`).
    pub size_bytes: u32,
    /// `--txonly-multi-flow`: testpmd varies each packet's source so RSS spreads them.
    pub multi_flow: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forwarding {
    TxOnly(TxPackets),
    /// Starts receiving as soon as the port is up (`--auto-start`).
    RxOnly,
}

/// Where testpmd's memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// Hugepages, with no files left in hugetlbfs or the runtime directory (`--in-memory`).
    Huge,
    /// Ordinary pages (`--no-huge -m MB`): slower, for hosts and tests without hugepages.
    Plain,
}

/// Everything one testpmd command line says.
#[derive(Debug, Clone)]
pub struct Plan {
    pub program: PathBuf,
    pub device: Device,
    /// The CPU of the main lcore, which only reads commands.
    pub main_cpu: usize,
    /// One CPU per forwarding lcore.
    pub cpus: Vec<usize>,
    /// Receive and transmit queues of the port.
    pub queues: u32,
    /// Descriptors per queue (`--rxd`, `--txd`).
    pub descriptors: u32,
    /// Packets per burst.
    pub burst: u32,
    pub memory: Memory,
    /// Names this process's runtime directory (/var/run/dpdk/PREFIX).
    pub file_prefix: String,
    pub forwarding: Forwarding,
    /// Passed through after sonde's own arguments, so they may override them.
    pub eal_extra: Vec<String>,
    pub testpmd_extra: Vec<String>,
}

impl Plan {
    /// mbufs for every descriptor of every queue twice over, plus each lcore's cache and
    /// burst (testpmd's default pool is sized for 32 ports and fails without hugepages).
    pub fn mbufs(&self) -> u32 {
        let rings = self.queues as u64 * 2 * self.descriptors as u64;
        let lcores = (self.cpus.len() + 1) as u64 * (MBUF_CACHE + self.burst as u64);
        (2 * (rings + lcores)).div_ceil(1024).saturating_mul(1024) as u32
    }

    /// Bytes of memory the plan needs: the pool and what EAL takes besides it.
    pub fn memory_bytes(&self) -> u64 {
        let per_mbuf = match self.memory {
            Memory::Huge => MBUF_BYTES,
            Memory::Plain => MBUF_BYTES_PLAIN,
        };
        self.mbufs() as u64 * per_mbuf + FIXED_BYTES
    }

    /// The argument vector after the program.
    pub fn args(&self) -> Vec<String> {
        let mut a: Vec<String> = vec!["-v".into()];
        a.extend(self.lcore_args());
        a.extend(["--file-prefix".into(), self.file_prefix.clone()]);
        match self.memory {
            Memory::Huge => a.push("--in-memory".into()),
            Memory::Plain => a.extend([
                "--no-huge".into(),
                "-m".into(),
                self.memory_bytes().div_ceil(1 << 20).to_string(),
            ]),
        }
        a.extend(self.device.eal_args());
        a.extend(self.eal_extra.iter().cloned());
        a.push("--".into());
        a.push("-i".into());
        let mode = match self.forwarding {
            Forwarding::TxOnly(_) => "txonly",
            Forwarding::RxOnly => "rxonly",
        };
        a.push(format!("--forward-mode={mode}"));
        a.push(format!("--nb-cores={}", self.cpus.len()));
        a.push(format!("--rxq={}", self.queues));
        a.push(format!("--txq={}", self.queues));
        a.push(format!("--rxd={}", self.descriptors));
        a.push(format!("--txd={}", self.descriptors));
        a.push(format!("--burst={}", self.burst));
        a.push(format!("--total-num-mbufs={}", self.mbufs()));
        match &self.forwarding {
            Forwarding::TxOnly(t) => {
                a.push(format!("--tx-ip={},{}", t.src, t.dst));
                a.push(format!("--tx-udp={},{}", t.src_port, t.dst_port));
                a.push(format!("--eth-peer=0,{}", mac(&t.peer_mac)));
                a.push(format!("--txpkts={}", t.size_bytes));
                if t.multi_flow {
                    a.push("--txonly-multi-flow".into());
                }
            }
            Forwarding::RxOnly => a.push("--auto-start".into()),
        }
        a.extend(self.testpmd_extra.iter().cloned());
        a
    }

    /// The whole command line as a person would type it.
    pub fn command_line(&self) -> String {
        std::iter::once(self.program.display().to_string())
            .chain(self.args())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// `-l main,cpus... --main-lcore main` as the reports write it; when the main lcore
    /// must share a CPU with a forwarding one (few CPUs), lcores mapped to CPUs instead.
    fn lcore_args(&self) -> Vec<String> {
        let distinct = !self.cpus.contains(&self.main_cpu)
            && self
                .cpus
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                == self.cpus.len();
        if distinct {
            let mut all = vec![self.main_cpu];
            all.extend(&self.cpus);
            let list: Vec<String> = all.iter().map(|c| c.to_string()).collect();
            return vec![
                "-l".into(),
                list.join(","),
                "--main-lcore".into(),
                self.main_cpu.to_string(),
            ];
        }
        let main = self.cpus.len();
        let mut map: Vec<String> = self
            .cpus
            .iter()
            .enumerate()
            .map(|(l, c)| format!("{l}@{c}"))
            .collect();
        map.push(format!("{main}@{}", self.main_cpu));
        vec![
            "--lcores".into(),
            map.join(","),
            "--main-lcore".into(),
            main.to_string(),
        ]
    }
}

fn mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(forwarding: Forwarding) -> Plan {
        Plan {
            program: "dpdk-testpmd".into(),
            device: Device::parse("net_af_packet0,iface=veth0").unwrap(),
            main_cpu: 0,
            cpus: vec![3, 5],
            queues: 2,
            descriptors: 2048,
            burst: 32,
            memory: Memory::Huge,
            file_prefix: "sonde-1-tx".into(),
            forwarding,
            eal_extra: vec![],
            testpmd_extra: vec!["--mbcache=512".into()],
        }
    }

    #[test]
    fn a_sender_line_reads_like_the_reports() {
        let p = plan(Forwarding::TxOnly(TxPackets {
            src: Ipv4Addr::new(198, 18, 0, 1),
            dst: Ipv4Addr::new(198, 18, 0, 2),
            src_port: 40000,
            dst_port: 5001,
            peer_mac: [0x1e, 0x11, 0x17, 0x90, 0xd9, 0x30],
            size_bytes: 64,
            multi_flow: true,
        }));
        assert_eq!(
            p.command_line(),
            "dpdk-testpmd -v -l 0,3,5 --main-lcore 0 --file-prefix sonde-1-tx --in-memory \
             --vdev=net_af_packet0,iface=veth0 --no-pci -- -i --forward-mode=txonly --nb-cores=2 \
             --rxq=2 --txq=2 --rxd=2048 --txd=2048 --burst=32 --total-num-mbufs=18432 \
             --tx-ip=198.18.0.1,198.18.0.2 --tx-udp=40000,5001 --eth-peer=0,1E:11:17:90:D9:30 \
             --txpkts=64 --txonly-multi-flow --mbcache=512"
        );
    }

    #[test]
    fn a_shared_main_cpu_maps_lcores_and_plain_memory_says_how_much() {
        let mut p = plan(Forwarding::RxOnly);
        p.cpus = vec![0];
        p.memory = Memory::Plain;
        let line = p.command_line();
        assert!(line.contains("--lcores 0@0,1@0 --main-lcore 1"), "{line}");
        let mb = p.memory_bytes().div_ceil(1 << 20);
        assert!(line.contains(&format!("--no-huge -m {mb} ")), "{line}");
        assert!(line.ends_with("--auto-start --mbcache=512"), "{line}");
        // 2 queues x 2 x 2048 descriptors and 2 lcores x 282, twice over, in 1024s.
        assert_eq!(p.mbufs(), 18432);
    }

    #[test]
    fn devices_are_told_apart() {
        assert_eq!(
            Device::parse("0000:3b:00.0").unwrap(),
            Device::Pci("0000:3b:00.0".into())
        );
        assert_eq!(
            Device::parse("3b:00.1,txq_inline=0").unwrap().pci_address(),
            Some("3b:00.1")
        );
        assert_eq!(
            Device::parse("--vdev=7870:00:00.0,mac=7c:1e:52:0f:c6:95").unwrap(),
            Device::Vdev("7870:00:00.0,mac=7c:1e:52:0f:c6:95".into())
        );
        assert_eq!(
            Device::parse("eth0").unwrap_err(),
            NotADevice("eth0".into())
        );
        assert!(Device::parse("eth0")
            .unwrap_err()
            .to_string()
            .contains("'eth0' is neither a PCI address"));
    }
}
