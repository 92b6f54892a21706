//! The XDP program the AF_XDP engine attaches, assembled here from eBPF instructions: it
//! redirects the test's own UDP packets (by destination or source port, IPv4 or IPv6) to the XSK of
//! the queue they arrived on and passes everything else (ARP, the control connection, any
//! other traffic) to the kernel. Twenty-odd instructions do not justify a C toolchain at
//! build time; the kernel's verifier checks them at load.

/// One eBPF instruction, as `struct bpf_insn` lays it out (little-endian hosts).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    /// dst in the low nibble, src in the high one.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

// Opcode parts (linux/bpf_common.h, linux/bpf.h).
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const JMP: u8 = 0x05;
const ALU64: u8 = 0x07;
const IMM: u8 = 0x00;
const MEM: u8 = 0x60;
const W: u8 = 0x00;
const H: u8 = 0x08;
const B: u8 = 0x10;
const DW: u8 = 0x18;
const K: u8 = 0x00;
const X: u8 = 0x08;
const ADD: u8 = 0x00;
const AND: u8 = 0x50;
const LSH: u8 = 0x60;
const MOV: u8 = 0xb0;
const JA: u8 = 0x00;
const JEQ: u8 = 0x10;
const JGT: u8 = 0x20;
const JNE: u8 = 0x50;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;
/// `ld_imm64` whose immediate is a map's file descriptor.
const PSEUDO_MAP_FD: u8 = 1;
/// `bpf_redirect_map(map, key, flags)`.
const HELPER_REDIRECT_MAP: i32 = 51;
pub const XDP_PASS: i32 = 2;

/// Offsets in `struct xdp_md`.
const MD_DATA: i16 = 0;
const MD_DATA_END: i16 = 4;
const MD_RX_QUEUE_INDEX: i16 = 16;

const ETH_LEN: i32 = 14;
const IPPROTO_UDP: i32 = 17;

/// A jump whose target is a label, resolved by [`Asm::finish`].
enum Op {
    Insn(Insn),
    Jump {
        code: u8,
        regs: u8,
        imm: i32,
        to: Label,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Label {
    Ipv4,
    Ipv6,
    Redirect,
    Pass,
}

#[derive(Default)]
struct Asm {
    ops: Vec<Op>,
    labels: Vec<(Label, usize)>,
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

impl Asm {
    fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.ops.push(Op::Insn(insn(code, dst, src, off, imm)));
    }
    fn mov(&mut self, dst: u8, src: u8) {
        self.op(ALU64 | MOV | X, dst, src, 0, 0);
    }
    fn mov_imm(&mut self, dst: u8, imm: i32) {
        self.op(ALU64 | MOV | K, dst, 0, 0, imm);
    }
    fn add_imm(&mut self, dst: u8, imm: i32) {
        self.op(ALU64 | ADD | K, dst, 0, 0, imm);
    }
    fn load(&mut self, size: u8, dst: u8, src: u8, off: i16) {
        self.op(LDX | MEM | size, dst, src, off, 0);
    }
    fn jump_imm(&mut self, cond: u8, dst: u8, imm: i32, to: Label) {
        let (code, regs) = (JMP | cond | K, dst);
        self.ops.push(Op::Jump {
            code,
            regs,
            imm,
            to,
        });
    }
    fn jump_reg(&mut self, cond: u8, dst: u8, src: u8, to: Label) {
        let (code, regs) = (JMP | cond | X, dst | (src << 4));
        self.ops.push(Op::Jump {
            code,
            regs,
            imm: 0,
            to,
        });
    }
    fn goto(&mut self, to: Label) {
        self.jump_imm(JA, 0, 0, to);
    }
    /// Goes to `Pass` unless `len` bytes from the packet pointer in `base` are inside it.
    fn need(&mut self, base: u8, len: i32) {
        self.mov(4, base);
        self.add_imm(4, len);
        self.jump_reg(JGT, 4, 3, Label::Pass);
    }
    /// Places `l` at the next instruction slot (`ld_imm64` is pushed as its two halves,
    /// so ops and slots count alike).
    fn label(&mut self, l: Label) {
        self.labels.push((l, self.ops.len()));
    }
    fn finish(self) -> Vec<Insn> {
        let at = |l: Label| {
            self.labels
                .iter()
                .find(|(x, _)| *x == l)
                .map(|(_, i)| *i)
                .expect("every jump target is placed")
        };
        self.ops
            .iter()
            .enumerate()
            .map(|(pc, op)| match *op {
                Op::Insn(i) => i,
                Op::Jump {
                    code,
                    regs,
                    imm,
                    to,
                } => Insn {
                    code,
                    regs,
                    off: (at(to) as i64 - pc as i64 - 1) as i16,
                    imm,
                },
            })
            .collect()
    }
}

/// A 16-bit field as a little-endian load of its network-order bytes reads it.
fn wire16(v: u16) -> i32 {
    v.swap_bytes() as i32
}

/// Which UDP packets the program takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steer {
    /// Those to this destination port: a receiver's, or an echo server's requests.
    ToPort(u16),
    /// Those from this source port: the answers a request/response client waits for,
    /// whatever source port each of its flows uses.
    FromPort(u16),
}

impl Steer {
    /// The port, and its offset in the UDP header.
    fn field(self) -> (u16, i16) {
        match self {
            Steer::ToPort(p) => (p, 2),
            Steer::FromPort(p) => (p, 0),
        }
    }
}

/// The redirect program for the UDP packets `steer` names; `map_fd` is the XSKMAP,
/// indexed by receive queue. A queue without a socket falls back to XDP_PASS (the low bits
/// of `bpf_redirect_map`'s flags, kernel 5.3 and later).
pub fn redirect_udp(steer: Steer, map_fd: i32) -> Vec<Insn> {
    let (port, at) = steer.field();
    let mut a = Asm::default();
    a.mov(6, 1); // r6 = ctx
    a.load(W, 2, 1, MD_DATA); // r2 = data
    a.load(W, 3, 1, MD_DATA_END); // r3 = data_end
    a.need(2, ETH_LEN);
    a.load(H, 5, 2, 12); // ethertype
    a.jump_imm(JEQ, 5, wire16(0x0800), Label::Ipv4);
    a.jump_imm(JEQ, 5, wire16(0x86dd), Label::Ipv6);
    a.goto(Label::Pass);

    a.label(Label::Ipv4);
    a.need(2, ETH_LEN + 20);
    a.load(B, 5, 2, 14 + 9); // protocol
    a.jump_imm(JNE, 5, IPPROTO_UDP, Label::Pass);
    a.load(B, 5, 2, 14); // version and header length
    a.op(ALU64 | AND | K, 5, 0, 0, 0x0f);
    a.op(ALU64 | LSH | K, 5, 0, 0, 2);
    a.mov(7, 2);
    a.add_imm(7, ETH_LEN);
    a.op(ALU64 | ADD | X, 7, 5, 0, 0); // r7 = UDP header
    a.need(7, 8);
    a.load(H, 5, 7, at); // the port
    a.jump_imm(JNE, 5, wire16(port), Label::Pass);
    a.goto(Label::Redirect);

    a.label(Label::Ipv6);
    a.need(2, ETH_LEN + 40 + 8);
    a.load(B, 5, 2, 14 + 6); // next header (no extension headers)
    a.jump_imm(JNE, 5, IPPROTO_UDP, Label::Pass);
    a.load(H, 5, 2, (ETH_LEN + 40) as i16 + at);
    a.jump_imm(JNE, 5, wire16(port), Label::Pass);

    a.label(Label::Redirect);
    a.load(W, 2, 6, MD_RX_QUEUE_INDEX);
    a.op(LD | IMM | DW, 1, PSEUDO_MAP_FD, 0, map_fd);
    a.op(0, 0, 0, 0, 0); // the second half of ld_imm64
    a.mov_imm(3, XDP_PASS);
    a.op(JMP | CALL, 0, 0, 0, HELPER_REDIRECT_MAP);
    a.op(JMP | EXIT, 0, 0, 0, 0);

    a.label(Label::Pass);
    a.mov_imm(0, XDP_PASS);
    a.op(JMP | EXIT, 0, 0, 0, 0);
    a.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_their_labels() {
        let p = redirect_udp(Steer::ToPort(5201), 7);
        let exits: Vec<usize> = (0..p.len()).filter(|&i| p[i].code == 0x95).collect();
        assert_eq!(exits.len(), 2);
        let pass = exits[1] - 1;
        assert_eq!(p[pass], insn(0xb7, 0, 0, 0, XDP_PASS));
        for (pc, i) in p.iter().enumerate() {
            let class = i.code & 0x07;
            let op = i.code & 0xf0;
            if class == JMP && op != CALL && op != EXIT {
                let to = pc as i64 + 1 + i.off as i64;
                assert!(to > pc as i64 && (to as usize) < p.len(), "jump at {pc}");
            }
        }
        // Every bounds check falls through to the pass block.
        let checks = p.iter().enumerate().filter(|(_, i)| i.code == 0x2d);
        for (pc, i) in checks {
            assert_eq!(pc as i64 + 1 + i.off as i64, pass as i64);
        }
    }

    #[test]
    fn port_and_map_are_where_the_kernel_reads_them() {
        let p = redirect_udp(Steer::ToPort(0x1451), 9);
        let ports: Vec<i32> = p
            .iter()
            .filter(|i| i.code == 0x55 && i.imm != IPPROTO_UDP)
            .map(|i| i.imm)
            .collect();
        assert_eq!(ports, vec![0x5114, 0x5114]);
        // Loads of 16 bits: ethertype, then the port, at 2 in UDP or 14 + 40 + 2 in IPv6.
        let offsets = |p: &[Insn]| -> Vec<i16> {
            p.iter().filter(|i| i.code == 0x69).map(|i| i.off).collect()
        };
        assert_eq!(offsets(&p), vec![12, 2, 56]);
        let from = redirect_udp(Steer::FromPort(0x1451), 9);
        assert_eq!(offsets(&from), vec![12, 0, 54]);
        let map = p.iter().position(|i| i.code == 0x18).unwrap();
        assert_eq!((p[map].regs, p[map].imm), (1 | (1 << 4), 9));
        assert_eq!(p[map + 1], insn(0, 0, 0, 0, 0));
    }
}
