//! The redirect program run on packets by a small eBPF interpreter (the instructions the
//! assembler emits, nothing more): which packets it steers, which it passes, and that it
//! never reads outside the packet whatever the packet's length.

use super::*;
use crate::xdp::frame::{udp_frame, Endpoints};

const XDP_REDIRECT: u64 = 4;
/// Where the interpreter places the context and the packet in its flat address space.
const CTX: u64 = 0x1000;
const PKT: u64 = 0x10_0000;
const QUEUE: u32 = 3;

/// What the program did with a packet.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// `bpf_redirect_map(map, queue, XDP_PASS)`.
    Redirect {
        map: i32,
        queue: u64,
    },
    Pass,
}

fn load(pkt: &[u8], addr: u64, size: u8) -> u64 {
    let n = match size {
        B => 1,
        H => 2,
        W => 4,
        _ => panic!("load size {size:#x}"),
    };
    if (CTX..CTX + 24).contains(&addr) {
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index.
        return match (addr - CTX) as i16 {
            MD_DATA => PKT,
            MD_DATA_END => PKT + pkt.len() as u64,
            MD_RX_QUEUE_INDEX => QUEUE as u64,
            other => panic!("context field {other}"),
        };
    }
    let at = addr.checked_sub(PKT).expect("a packet address") as usize;
    let bytes = pkt
        .get(at..at + n)
        .unwrap_or_else(|| panic!("read of {n} at {at} past a {}-byte packet", pkt.len()));
    let mut v = [0u8; 8];
    v[..n].copy_from_slice(bytes);
    u64::from_le_bytes(v)
}

/// Runs `prog` on `pkt`, as the kernel would after the verifier accepted it.
fn run(prog: &[Insn], pkt: &[u8]) -> Verdict {
    let mut r = [0u64; 11];
    r[1] = CTX;
    let (mut pc, mut redirected) = (0usize, None);
    for _ in 0..1000 {
        let i = prog[pc];
        let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
        let imm = i.imm as i64 as u64;
        pc += 1;
        let class = i.code & 0x07;
        let op = i.code & 0xf0;
        let operand = if i.code & X != 0 { r[src] } else { imm };
        match class {
            ALU64 => {
                r[dst] = match op {
                    MOV => operand,
                    ADD => r[dst].wrapping_add(operand),
                    AND => r[dst] & operand,
                    LSH => r[dst] << operand,
                    _ => panic!("alu op {op:#x}"),
                }
            }
            LDX => r[dst] = load(pkt, r[src].wrapping_add(i.off as i64 as u64), i.code & 0x18),
            LD => {
                assert_eq!((i.code, src as u8), (LD | IMM | DW, PSEUDO_MAP_FD));
                r[dst] = i.imm as u64;
                pc += 1;
            }
            JMP | JMP32 if op == CALL => {
                assert_eq!(i.imm, HELPER_REDIRECT_MAP);
                redirected = Some(Verdict::Redirect {
                    map: r[1] as i32,
                    queue: r[2],
                });
                assert_eq!(r[3], XDP_PASS as u64, "falls back to the kernel");
                r[0] = XDP_REDIRECT;
            }
            JMP if op == EXIT => {
                return match r[0] {
                    XDP_REDIRECT => redirected.expect("a redirect call"),
                    v if v == XDP_PASS as u64 => Verdict::Pass,
                    v => panic!("verdict {v}"),
                };
            }
            JMP | JMP32 => {
                let (a, b) = if class == JMP32 {
                    (r[dst] as u32 as u64, operand as u32 as u64)
                } else {
                    (r[dst], operand)
                };
                let taken = match op {
                    JNE => a != b,
                    JGT => a > b,
                    _ => panic!("jump op {op:#x}"),
                };
                if taken {
                    pc = (pc as i64 + i.off as i64) as usize;
                }
            }
            _ => panic!("class {class:#x}"),
        }
    }
    panic!("no exit in 1000 steps")
}

const CLIENT: &str = "198.18.0.1:40000";
/// An address whose last byte has its top bit set: compared as a sign-extended 64-bit
/// immediate it would never match.
const AGENT: &str = "198.18.0.200:5201";

fn frame(src: &str, dst: &str) -> Vec<u8> {
    udp_frame(
        &Endpoints {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
        },
        32,
    )
}

fn v4(s: &str) -> Ipv4Addr {
    match s.parse::<std::net::SocketAddr>().unwrap().ip() {
        std::net::IpAddr::V4(a) => a,
        _ => unreachable!(),
    }
}

const STEERED: Verdict = Verdict::Redirect {
    map: 9,
    queue: QUEUE as u64,
};

#[test]
fn the_echo_takes_only_its_peers_packets_to_its_port() {
    let steer = Steer::new(v4(CLIENT), v4(AGENT), Port::To(5201)).unwrap();
    let p = redirect_udp(steer, 9);
    assert_eq!(run(&p, &frame(CLIENT, AGENT)), STEERED);
    // Any source port of the peer: each connection has its own.
    assert_eq!(run(&p, &frame("198.18.0.1:1", AGENT)), STEERED);
    for (src, dst, why) in [
        ("198.18.0.3:40000", AGENT, "another host, same port"),
        (CLIENT, "198.18.0.200:5202", "another port"),
        (CLIENT, "198.18.0.201:5201", "another destination address"),
        (CLIENT, "198.18.0.200:53", "the host's DNS"),
        (AGENT, CLIENT, "the other direction"),
    ] {
        assert_eq!(run(&p, &frame(src, dst)), Verdict::Pass, "{why}");
    }
}

#[test]
fn the_client_takes_only_the_agents_answers_from_its_port() {
    let steer = Steer::new(v4(AGENT), v4(CLIENT), Port::From(5201)).unwrap();
    let p = redirect_udp(steer, 9);
    assert_eq!(run(&p, &frame(AGENT, CLIENT)), STEERED);
    // The agent's DNS replies to this host are not the test's.
    assert_eq!(
        run(&p, &frame("198.18.0.200:53", CLIENT)),
        Verdict::Pass,
        "DNS from the agent's host"
    );
    assert_eq!(
        run(&p, &frame("198.18.0.9:5201", CLIENT)),
        Verdict::Pass,
        "another host's port 5201"
    );
}

#[test]
fn everything_but_whole_udp_over_ipv4_goes_to_the_kernel() {
    let steer = Steer::new(v4(CLIENT), v4(AGENT), Port::To(5201)).unwrap();
    let p = redirect_udp(steer, 9);
    let ours = frame(CLIENT, AGENT);
    let mut arp = ours.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let mut tcp = ours.clone();
    tcp[14 + 9] = 6;
    let mut fragment = ours.clone();
    fragment[14 + 6..14 + 8].copy_from_slice(&[0x00, 0x10]); // offset 128 bytes
    let mut first_fragment = ours.clone();
    first_fragment[14 + 6] = 0x20; // more fragments
    let v6 = frame("[2001:db8::1]:40000", "[2001:db8::2]:5201");
    for (pkt, what) in [
        (arp, "ARP"),
        (tcp, "TCP"),
        (fragment, "a later fragment"),
        (first_fragment, "a first fragment"),
        (v6, "IPv6"),
    ] {
        assert_eq!(run(&p, &pkt), Verdict::Pass, "{what}");
    }
    // Every truncation of a test packet is passed, never read past its end.
    for len in 0..ours.len() - 32 {
        assert_eq!(run(&p, &ours[..len]), Verdict::Pass, "{len} bytes");
    }
    // IPv4 options move the UDP header; the port is still found.
    let mut options = ours[..34].to_vec();
    options[14] = 0x46;
    options.extend_from_slice(&[1, 1, 1, 1]);
    options.extend_from_slice(&ours[34..]);
    assert_eq!(run(&p, &options), STEERED);
}

#[test]
fn well_known_ports_are_refused() {
    let (a, b) = (v4(CLIENT), v4(AGENT));
    for port in [Port::To(53), Port::From(53), Port::To(0), Port::From(1023)] {
        let e = Steer::new(a, b, port).unwrap_err().to_string();
        assert!(
            e.contains("well-known") && e.contains("no agent flag"),
            "{e}"
        );
    }
    assert!(Steer::new(a, b, Port::From(1024)).is_ok());
}

#[test]
fn jumps_land_inside_the_program_and_bounds_checks_on_the_pass_block() {
    let p = redirect_udp(
        Steer::new(v4(CLIENT), v4(AGENT), Port::To(5201)).unwrap(),
        9,
    );
    let exits: Vec<usize> = (0..p.len()).filter(|&i| p[i].code == 0x95).collect();
    assert_eq!(exits.len(), 2);
    let pass = exits[1] - 1;
    assert_eq!(p[pass], insn(0xb7, 0, 0, 0, XDP_PASS));
    for (pc, i) in p.iter().enumerate() {
        let class = i.code & 0x07;
        let op = i.code & 0xf0;
        if (class == JMP || class == JMP32) && op != CALL && op != EXIT {
            let to = pc as i64 + 1 + i.off as i64;
            assert!(to > pc as i64 && (to as usize) < p.len(), "jump at {pc}");
        }
    }
    let checks = p.iter().enumerate().filter(|(_, i)| i.code == 0x2d);
    for (pc, i) in checks {
        assert_eq!(pc as i64 + 1 + i.off as i64, pass as i64);
    }
    // A test packet runs every instruction up to the redirect: the per-packet cost.
    assert!(p.len() <= 40, "{} instructions", p.len());
}
