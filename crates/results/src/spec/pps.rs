//! The packet-rate spec: the controller sends UDP packets, the agent receives them.

use serde::{Deserialize, Serialize};

use super::{check_count, refuse, Execution, PollMode, SpecError, Timing, MAX_THREADS};

/// Ethernet (14) + IPv4 (20) + UDP (8) bytes around a UDP payload, as testpmd counts a
/// packet's length (no preamble, no FCS).
pub const PACKET_OVERHEAD_BYTES: u32 = 42;
/// Ethernet (14) + IPv6 (40) + UDP (8) header bytes.
pub const PACKET_OVERHEAD_BYTES_V6: u32 = 62;
/// sonde's header in every packet: cookie, flow, sequence number.
pub const PACKET_HEADER_BYTES: u32 = 16;
pub const MIN_PACKET_BYTES: u32 = PACKET_OVERHEAD_BYTES + PACKET_HEADER_BYTES;
/// A jumbo frame; the controller also checks the size against the interface's MTU.
pub const MAX_PACKET_BYTES: u32 = 9014;
pub const MAX_FLOWS: u32 = 4096;
pub const MAX_BATCH: u32 = 1024;
/// Descriptors per DPDK queue: the published reports' `--rxd/--txd 2048`.
pub const DPDK_DESCRIPTORS: u32 = 2048;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PpsSpec {
    /// Bytes per packet on the wire: Ethernet + IPv4 + UDP headers + payload, no FCS.
    pub size_bytes: u32,
    pub tx_threads: u32,
    /// SO_REUSEPORT receivers on the agent, one thread each.
    pub rx_threads: u32,
    /// Flows, each its own source port, so RSS and SO_REUSEPORT spread them.
    pub flows: u32,
    /// Packets per sendmmsg/recvmmsg call (per GSO send with `gso`).
    pub batch: u32,
    /// UDP GSO on the sender: one send per batch, segmented by the kernel (as by a NIC's
    /// segmentation offload); the packets that reach the receiver are the same.
    #[serde(default)]
    pub gso: bool,
    /// Offered packets per second over all senders; `None`: as fast as possible.
    pub rate_pps: Option<f64>,
    /// No cool-down: the sender stops at the end of the window.
    #[serde(flatten)]
    pub timing: Timing,
    pub poll: PollMode,
    #[serde(flatten)]
    pub execution: Execution,
    /// The packets are IPv6 (set by the controller from the agent's address): 62 bytes of
    /// headers instead of 42.
    #[serde(default)]
    pub ipv6: bool,
    /// The DPDK engine's devices, queues and pass-through arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpdk: Option<Box<DpdkSpec>>,
    /// The far end sends and this side receives (`sonde pps --iperf3 -R`: an iperf3
    /// server's UDP test reversed); absent, the usual direction.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reverse: bool,
    /// Both ends send at once, each on its own flows at `rate_pps` (`sonde pps --iperf3
    /// --bidir`, iperf3's `--bidir`): the far end's direction is the document's reverse.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bidir: bool,
}

/// What the DPDK engine's testpmd runs with on each side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DpdkSpec {
    /// The controller's device (`--dpdk-dev`); `None`: the one behind the interface that
    /// carries the test.
    pub client_device: Option<String>,
    /// The agent's device (`--server-dpdk-dev`); `None`: chosen the same way by the agent.
    pub server_device: Option<String>,
    /// Queues of the sender's port (`--tx-queues`); 0: one per forwarding lcore.
    pub tx_queues: u32,
    /// Queues of the receiver's port (`--rx-queues`); 0: one per forwarding lcore.
    pub rx_queues: u32,
    /// Descriptors per queue.
    pub descriptors: u32,
    /// The client side's EAL arguments passed through (`--dpdk-args`, before its `--`).
    /// Documents of before the split name it `eal_args` (then both sides had it).
    #[serde(alias = "eal_args")]
    pub client_eal_args: Vec<String>,
    /// The client side's testpmd arguments passed through (after its `--`).
    #[serde(alias = "testpmd_args")]
    pub client_testpmd_args: Vec<String>,
    /// The agent's EAL arguments (`--server-dpdk-args`, before its `--`): an agent takes
    /// only a short list of them from the network.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_eal_args: Vec<String>,
    /// The agent's testpmd arguments (after its `--`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_testpmd_args: Vec<String>,
}

impl Default for DpdkSpec {
    fn default() -> Self {
        DpdkSpec {
            client_device: None,
            server_device: None,
            tx_queues: 0,
            rx_queues: 0,
            descriptors: DPDK_DESCRIPTORS,
            client_eal_args: Vec::new(),
            client_testpmd_args: Vec::new(),
            server_eal_args: Vec::new(),
            server_testpmd_args: Vec::new(),
        }
    }
}

impl DpdkSpec {
    /// Splits `--dpdk-args`: EAL words, then testpmd's after a `--`.
    pub fn split_args(words: &[String]) -> (Vec<String>, Vec<String>) {
        match words.iter().position(|w| w == "--") {
            Some(at) => (words[..at].to_vec(), words[at + 1..].to_vec()),
            None => (words.to_vec(), Vec::new()),
        }
    }

    /// `role`'s testpmd arguments passed through: EAL's, then testpmd's own.
    pub fn args(&self, role: crate::side::Role) -> (&[String], &[String]) {
        role.pick(
            (&self.client_eal_args, &self.client_testpmd_args),
            (&self.server_eal_args, &self.server_testpmd_args),
        )
    }

    /// `role`'s testpmd arguments, to be replaced (an agent confines what it was sent).
    pub fn args_mut(&mut self, role: crate::side::Role) -> (&mut Vec<String>, &mut Vec<String>) {
        match role {
            crate::side::Role::Client => (&mut self.client_eal_args, &mut self.client_testpmd_args),
            crate::side::Role::Server => (&mut self.server_eal_args, &mut self.server_testpmd_args),
        }
    }

    /// `role`'s testpmd takes its memory from ordinary pages (`--no-huge` passed through).
    pub fn without_hugepages(&self, role: crate::side::Role) -> bool {
        self.args(role).0.iter().any(|a| a == "--no-huge")
    }

    /// Queues of `role`'s port for `lcores` forwarding lcores.
    pub fn queues(&self, role: crate::side::Role, lcores: u32) -> u32 {
        let asked = role.pick(self.tx_queues, self.rx_queues);
        if asked == 0 {
            lcores.max(1)
        } else {
            asked
        }
    }
}

impl Default for PpsSpec {
    fn default() -> Self {
        PpsSpec {
            size_bytes: 64,
            tx_threads: 1,
            rx_threads: 1,
            flows: 1,
            batch: 32,
            gso: false,
            rate_pps: None,
            timing: Timing::measuring(10_000),
            poll: PollMode::Block,
            execution: Execution::default(),
            ipv6: false,
            dpdk: None,
            reverse: false,
            bidir: false,
        }
    }
}

impl PpsSpec {
    /// Ethernet, IP and UDP header bytes of one packet, for its address family.
    pub fn overhead_bytes(&self) -> u32 {
        if self.ipv6 {
            PACKET_OVERHEAD_BYTES_V6
        } else {
            PACKET_OVERHEAD_BYTES
        }
    }

    pub fn payload_bytes(&self) -> u32 {
        self.size_bytes.saturating_sub(self.overhead_bytes())
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        let least = self.overhead_bytes() + PACKET_HEADER_BYTES;
        if self.size_bytes < least || self.size_bytes > MAX_PACKET_BYTES {
            return refuse(
                "--size",
                format!(
                    "{} bytes is not in {least}..={MAX_PACKET_BYTES} ({} bytes of Ethernet/{}/UDP headers + {PACKET_HEADER_BYTES} of sonde's header at least)",
                    self.size_bytes,
                    self.overhead_bytes(),
                    if self.ipv6 { "IPv6" } else { "IPv4" },
                ),
            );
        }
        check_count("--flows", self.flows, MAX_FLOWS)?;
        check_count("--tx-threads", self.tx_threads, MAX_THREADS)?;
        check_count("--rx-threads", self.rx_threads, MAX_THREADS)?;
        check_count("--batch", self.batch, MAX_BATCH)?;
        if let Some(r) = self.rate_pps {
            if !(r.is_finite() && r > 0.0 && r <= 1e9) {
                return refuse("--rate", format!("{r} is not a packet rate in (0, 1e9]"));
            }
        }
        if self.timing.cooldown_ms != 0 {
            return refuse(
                "--cooldown",
                "pps has none: its sender stops with the window",
            );
        }
        self.timing.check()?;
        self.execution.check()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{assert_refused, with};
    use super::*;

    #[test]
    fn pps_refusals_name_the_flag() {
        let with = with::<PpsSpec>;
        let cases = vec![
            (with(&|s| s.size_bytes = 57), "--size"),
            (with(&|s| s.size_bytes = 10_000), "--size"),
            (with(&|s| s.flows = 0), "--flows"),
            (with(&|s| s.batch = 0), "--batch"),
            (with(&|s| s.rx_threads = 0), "--rx-threads"),
            (with(&|s| s.rate_pps = Some(-1.0)), "--rate"),
            (with(&|s| s.timing.cooldown_ms = 5), "--cooldown"),
        ];
        assert_refused(cases, PpsSpec::validate);
    }

    #[test]
    fn header_bytes_follow_the_address_family() {
        let ok = PpsSpec::default();
        ok.validate().unwrap();
        assert_eq!(ok.payload_bytes(), 22);
        let v6 = PpsSpec {
            ipv6: true,
            ..ok.clone()
        };
        assert_eq!(v6.payload_bytes(), 2);
        let e = v6.validate().unwrap_err();
        assert!(e.flag == "--size" && e.reason.contains("78..="), "{e:?}");
        let v6 = PpsSpec {
            size_bytes: 78,
            ..v6
        };
        assert_eq!(v6.payload_bytes(), 16);
        assert!(v6.validate().is_ok());
    }
}
