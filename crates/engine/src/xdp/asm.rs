//! The XDP program the AF_XDP engine attaches, assembled here from eBPF instructions: it
//! redirects the test's own UDP packets (IPv4, matched by both addresses and the data
//! port) to the XSK of the queue they arrived on and passes everything else (ARP, the
//! control connection, another host's packets to the same port, the host's own services)
//! to the kernel. Steering by port alone took, for a test aimed at port 53, the host's
//! DNS replies for the test's length. Twenty-odd instructions do not justify a C toolchain at
//! build time; the kernel's verifier checks them at load.

use std::net::Ipv4Addr;

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

use op::*;

/// The parts an eBPF opcode is or-ed from (linux/bpf_common.h, linux/bpf.h): class, size
/// or operation, source. Both programs (this one and the TOS filter) are written in them.
pub(crate) mod op {
    pub(crate) const LD: u8 = 0x00;
    pub(crate) const LDX: u8 = 0x01;
    pub(crate) const STX: u8 = 0x03;
    pub(crate) const JMP: u8 = 0x05;
    pub(crate) const JMP32: u8 = 0x06;
    pub(crate) const ALU64: u8 = 0x07;
    pub(crate) const IMM: u8 = 0x00;
    pub(crate) const ABS: u8 = 0x20;
    pub(crate) const MEM: u8 = 0x60;
    pub(crate) const ATOMIC: u8 = 0xc0;
    pub(crate) const W: u8 = 0x00;
    pub(crate) const H: u8 = 0x08;
    pub(crate) const B: u8 = 0x10;
    pub(crate) const DW: u8 = 0x18;
    pub(crate) const K: u8 = 0x00;
    pub(crate) const X: u8 = 0x08;
    pub(crate) const ADD: u8 = 0x00;
    pub(crate) const AND: u8 = 0x50;
    pub(crate) const LSH: u8 = 0x60;
    pub(crate) const RSH: u8 = 0x70;
    pub(crate) const MOV: u8 = 0xb0;
    pub(crate) const JA: u8 = 0x00;
    pub(crate) const JEQ: u8 = 0x10;
    pub(crate) const JGT: u8 = 0x20;
    pub(crate) const JGE: u8 = 0x30;
    pub(crate) const JNE: u8 = 0x50;
    pub(crate) const JLT: u8 = 0xa0;
    pub(crate) const CALL: u8 = 0x80;
    pub(crate) const EXIT: u8 = 0x90;
}
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

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Label {
    Pass,
}

/// Instructions whose jumps name labels `L`, resolved to offsets by [`Asm::finish`]: the
/// builder of the XDP program here and of the TOS-counting socket filter (`marks`).
pub(crate) struct Asm<L> {
    /// Each instruction, and the label a jump goes to (its offset is set at the end).
    insns: Vec<(Insn, Option<L>)>,
    labels: Vec<(L, usize)>,
}

impl<L> Default for Asm<L> {
    fn default() -> Asm<L> {
        Asm {
            insns: Vec::new(),
            labels: Vec::new(),
        }
    }
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

impl<L: Copy + Eq> Asm<L> {
    pub(crate) fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.insns.push((insn(code, dst, src, off, imm), None));
    }
    /// A jump to `to`; `regs` holds dst in the low nibble, src in the high one.
    pub(crate) fn jump(&mut self, code: u8, regs: u8, imm: i32, to: L) {
        let jump = Insn {
            code,
            regs,
            off: 0,
            imm,
        };
        self.insns.push((jump, Some(to)));
    }
    /// Places `l` at the next instruction slot (`ld_imm64` is pushed as its two halves,
    /// so instructions and slots count alike).
    pub(crate) fn label(&mut self, l: L) {
        self.labels.push((l, self.insns.len()));
    }
    pub(crate) fn finish(self) -> Vec<Insn> {
        let at = |l: L| {
            let found = self.labels.iter().find(|(x, _)| *x == l);
            found.map(|(_, i)| *i).expect("every jump target is placed")
        };
        let resolve = |(pc, &(mut i, to)): (usize, &(Insn, Option<L>))| {
            if let Some(l) = to {
                i.off = (at(l) as i64 - pc as i64 - 1) as i16;
            }
            i
        };
        self.insns.iter().enumerate().map(resolve).collect()
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
    fn jump_imm(&mut self, cond: u8, dst: u8, imm: i32, to: L) {
        self.jump(JMP | cond | K, dst, imm, to);
    }
    /// A jump on the low 32 bits of `dst` (an address whose top bit is set must not be
    /// compared with its sign-extended immediate).
    fn jump32_imm(&mut self, cond: u8, dst: u8, imm: i32, to: L) {
        self.jump(JMP32 | cond | K, dst, imm, to);
    }
    fn jump_reg(&mut self, cond: u8, dst: u8, src: u8, to: L) {
        self.jump(JMP | cond | X, dst | (src << 4), 0, to);
    }
    /// Goes to `to` unless `len` bytes from the packet pointer in `base` are inside it.
    fn need(&mut self, base: u8, len: i32, to: L) {
        self.mov(4, base);
        self.add_imm(4, len);
        self.jump_reg(JGT, 4, 3, to);
    }
}

/// A 16-bit field as a little-endian load of its network-order bytes reads it.
fn wire16(v: u16) -> i32 {
    v.swap_bytes() as i32
}

/// A 32-bit field (an IPv4 address) as a little-endian load of its bytes reads it.
fn wire32(a: Ipv4Addr) -> i32 {
    u32::from_le_bytes(a.octets()) as i32
}

/// The lowest port the program may steer: below it are the host's own services (DNS,
/// NTP, ...), whose packets a test must never take from the kernel.
pub const LOWEST_PORT: u16 = 1024;

/// The port of a flow that the program matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// Packets to this port: a receiver's, or an echo server's requests.
    To(u16),
    /// Packets from this port: the answers a request/response client waits for, to
    /// whichever source port each of its flows uses.
    From(u16),
}

/// Which UDP packets the program takes: one test's, by source and destination address and
/// its data port. Everything else (another host's traffic to the same port, the host's
/// own services, ARP, IPv6, fragments) goes on to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steer {
    /// The test's peer.
    pub src: Ipv4Addr,
    /// This host's address in the test.
    pub dst: Ipv4Addr,
    pub port: Port,
}

/// Why a flow may not be steered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SteerError {
    #[error(
        "UDP {which} port {port} is a well-known port (below {LOWEST_PORT}): steering it would \
         take the host's own service traffic (DNS, NTP, ...) from the kernel; no agent flag \
         allows this, use a data port of {LOWEST_PORT} or above"
    )]
    WellKnownPort { which: &'static str, port: u16 },
}

impl Steer {
    /// The flow from `src` to `dst` with `port`, refused for a well-known port.
    pub fn new(src: Ipv4Addr, dst: Ipv4Addr, port: Port) -> Result<Steer, SteerError> {
        let steer = Steer { src, dst, port };
        let (which, port) = steer.port_named();
        if port < LOWEST_PORT {
            return Err(SteerError::WellKnownPort { which, port });
        }
        Ok(steer)
    }

    /// "to" or "from", and the port.
    pub fn port_named(self) -> (&'static str, u16) {
        match self.port {
            Port::To(p) => ("to", p),
            Port::From(p) => ("from", p),
        }
    }

    /// The port, and its offset in the UDP header.
    fn field(self) -> (u16, i16) {
        match self.port {
            Port::To(p) => (p, 2),
            Port::From(p) => (p, 0),
        }
    }
}

/// The redirect program for the flow `steer` names; `map_fd` is the XSKMAP, indexed by
/// receive queue. A queue without a socket falls back to XDP_PASS (the low bits of
/// `bpf_redirect_map`'s flags, kernel 5.3 and later). A test packet runs every check,
/// each a load and a compare; the addresses come first, so another host's traffic leaves
/// early.
pub fn redirect_udp(steer: Steer, map_fd: i32) -> Vec<Insn> {
    let (port, at) = steer.field();
    let mut a = Asm::default();
    a.mov(6, 1); // r6 = ctx
    a.load(W, 2, 1, MD_DATA); // r2 = data
    a.load(W, 3, 1, MD_DATA_END); // r3 = data_end
    a.need(2, ETH_LEN + 20, Label::Pass);
    a.load(H, 5, 2, 12); // ethertype: IPv4 only (the engine refuses IPv6)
    a.jump_imm(JNE, 5, wire16(0x0800), Label::Pass);
    a.load(W, 5, 2, 14 + 12); // source address
    a.jump32_imm(JNE, 5, wire32(steer.src), Label::Pass);
    a.load(W, 5, 2, 14 + 16); // destination address
    a.jump32_imm(JNE, 5, wire32(steer.dst), Label::Pass);
    a.load(B, 5, 2, 14 + 9); // protocol
    a.jump_imm(JNE, 5, IPPROTO_UDP, Label::Pass);
    a.load(H, 5, 2, 14 + 6); // flags and fragment offset: a fragment has no port to read
    a.op(ALU64 | AND | K, 5, 0, 0, wire16(0x3fff));
    a.jump_imm(JNE, 5, 0, Label::Pass);
    a.load(B, 5, 2, 14); // version and header length
    a.op(ALU64 | AND | K, 5, 0, 0, 0x0f);
    a.op(ALU64 | LSH | K, 5, 0, 0, 2);
    a.mov(7, 2);
    a.add_imm(7, ETH_LEN);
    a.op(ALU64 | ADD | X, 7, 5, 0, 0); // r7 = UDP header
    a.need(7, 8, Label::Pass);
    a.load(H, 5, 7, at); // the port
    a.jump_imm(JNE, 5, wire16(port), Label::Pass);

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
#[path = "asm_tests.rs"]
mod tests;
