//! Counting a receiver's datagrams by the TOS byte they arrived with inside the kernel: an
//! eBPF socket filter on each socket of the test's group reads the IP header's TOS (IPv4)
//! or Traffic Class (IPv6) of each of the test's own datagrams ([`Match`]: pps's cookie and
//! a flow in range, a request's length and cookie, an answer's length: what the receiver
//! accounts as ours) and adds one to a per-CPU count, then accepts the datagram unchanged.
//! A foreign datagram (another cookie, too short) is accepted and not counted.
//!
//! Why: `IP_RECVTOS` makes the kernel write a control message per datagram in recvmmsg,
//! measured at 60-80 ns a datagram on a 550 ns receive (BENCHMARKS.md, "Marks on every
//! packet"): a marked pps receiver ran 12 % slower. The filter costs a few loads and
//! an add in the softirq that delivers the datagram.
//!
//! The counts live in an mmap-able BPF array, 256 slots per possible CPU plus one for a
//! CPU beyond that count (counted as unread, never lost): the receiver reads them with
//! plain loads, no system call. The program and its map are owned by descriptors: the
//! sockets hold the program while they are open, so closing them (or the process dying,
//! however it dies) leaves nothing in the kernel. Loading needs CAP_BPF (root here); where
//! it is refused, the receiver reads the control messages instead and says so.
//!
//! The filter runs before the socket's receive queue: a datagram the full queue then
//! drops is counted here and in the socket's drops, not in the datagrams read.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::xdp::bpf::{bpf, load_prog, owned, MapCreate, BPF_MAP_CREATE};
use crate::xdp::op::*;
use crate::xdp::{Asm, Insn};

/// The name every loaded filter carries (16 bytes with the NUL), so a test can look for
/// one left behind.
pub const PROG_NAME: &str = "sonde_tos_count";

const BPF_PROG_GET_NEXT_ID: libc::c_int = 11;
const BPF_PROG_GET_FD_BY_ID: libc::c_int = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;
const BPF_F_MMAPABLE: u32 = 1 << 10;
const SO_ATTACH_BPF: libc::c_int = 50;

/// `ld_abs`'s offset of the network header (`SKF_NET_OFF`): the IP header, wherever
/// the socket's view of the packet starts (a UDP socket's at the UDP header).
const NET_OFF: i32 = -0x10_0000;
/// UDP header, then ours: cookie (4), flow (4), sequence (8).
const UDP_HEADER: i32 = 8;

const HELPER_MAP_LOOKUP: i32 = 1;
const HELPER_SMP_PROCESSOR_ID: i32 = 8;

/// Which datagrams a filter counts: the test's own, as its receiver accounts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// pps: the cookie (as its sender writes it) at the payload's start and a flow below
    /// `flows` after it.
    Pps { cookie: u32, flows: u32 },
    /// A request/response test's UDP request: `bytes` of payload whose bytes 8 to 15 (after
    /// the sequence number) are the cookie, big-endian (`udp_match`).
    Request { cookie: u64, bytes: u32 },
    /// Every datagram of `bytes` of payload: the answers on a connected socket, which
    /// only its peer's datagrams reach.
    Length { bytes: u32 },
}

/// The filter: the TOS of each datagram `m` takes counted in slot `cpu * 256 + tos` of
/// `map_fd` (slot `cpus * 256` for a CPU at or beyond `cpus`); every datagram accepted
/// whole. Nothing is read past a datagram's end (`ld_abs` would drop it): the length is
/// checked first.
fn program(m: Match, cpus: u32, map_fd: RawFd) -> Vec<Insn> {
    let mut p = Asm::default();
    p.op(ALU64 | MOV | X, 6, 1, 0, 0); // r6 = skb: ld_abs reads through it
    p.op(LDX | MEM | W, 0, 6, 0, 0); // r0 = skb->len, from the UDP header on
    match m {
        Match::Pps { cookie, flows } => {
            p.jump(JMP | JLT | K, 0, UDP_HEADER + 8, Label::Accept);
            p.op(LD | ABS | W, 0, 0, 0, UDP_HEADER); // the cookie, in host order
            p.jump(JMP32 | JNE | K, 0, cookie as i32, Label::Accept);
            p.op(LD | ABS | W, 0, 0, 0, UDP_HEADER + 4); // the flow
            p.jump(JMP | JGE | K, 0, flows as i32, Label::Accept);
        }
        Match::Request { cookie, bytes } => {
            p.jump(JMP | JNE | K, 0, UDP_HEADER + bytes as i32, Label::Accept);
            p.jump(JMP | JLT | K, 0, UDP_HEADER + 16, Label::Accept);
            // ld_abs reads big-endian: the cookie's high word, then its low one.
            p.op(LD | ABS | W, 0, 0, 0, UDP_HEADER + 8);
            p.jump(
                JMP32 | JNE | K,
                0,
                (cookie >> 32) as u32 as i32,
                Label::Accept,
            );
            p.op(LD | ABS | W, 0, 0, 0, UDP_HEADER + 12);
            p.jump(JMP32 | JNE | K, 0, cookie as u32 as i32, Label::Accept);
        }
        Match::Length { bytes } => {
            p.jump(JMP | JNE | K, 0, UDP_HEADER + bytes as i32, Label::Accept)
        }
    }
    p.op(LD | ABS | B, 0, 0, 0, NET_OFF); // version and header length
    p.op(ALU64 | RSH | K, 0, 0, 0, 4);
    p.jump(JMP | JEQ | K, 0, 6, Label::V6);
    p.op(LD | ABS | B, 0, 0, 0, NET_OFF + 1); // IPv4's TOS
    p.op(ALU64 | MOV | X, 7, 0, 0, 0);
    p.jump(JMP | JA, 0, 0, Label::Index);
    p.label(Label::V6);
    p.op(LD | ABS | H, 0, 0, 0, NET_OFF); // version, traffic class, flow label's top
    p.op(ALU64 | RSH | K, 0, 0, 0, 4);
    p.op(ALU64 | AND | K, 0, 0, 0, 0xff);
    p.op(ALU64 | MOV | X, 7, 0, 0, 0);
    p.label(Label::Index);
    p.op(JMP | CALL, 0, 0, 0, HELPER_SMP_PROCESSOR_ID);
    p.jump(JMP | JGE | K, 0, cpus as i32, Label::Beyond);
    p.op(ALU64 | LSH | K, 0, 0, 0, 8);
    p.op(ALU64 | ADD | X, 7, 0, 0, 0); // r7 = cpu * 256 + tos
    p.jump(JMP | JA, 0, 0, Label::Store);
    p.label(Label::Beyond);
    p.op(ALU64 | MOV | K, 7, 0, 0, (cpus * 256) as i32); // a CPU beyond the count: unread
    p.label(Label::Store);
    p.op(STX | MEM | W, 10, 7, -4, 0);
    p.op(ALU64 | MOV | X, 2, 10, 0, 0);
    p.op(ALU64 | ADD | K, 2, 0, 0, -4);
    p.op(LD | IMM | DW, 1, 1, 0, map_fd); // src 1: the immediate is a map's descriptor
    p.op(0, 0, 0, 0, 0);
    p.op(JMP | CALL, 0, 0, 0, HELPER_MAP_LOOKUP);
    p.jump(JMP | JEQ | K, 0, 0, Label::Accept);
    p.op(ALU64 | MOV | K, 1, 0, 0, 1);
    p.op(STX | ATOMIC | DW, 0, 1, 0, 0);
    p.label(Label::Accept);
    p.op(ALU64 | MOV | K, 0, 0, 0, -1); // keep every byte
    p.op(JMP | EXIT, 0, 0, 0, 0);
    p.finish()
}

/// Where the filter's jumps go.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Label {
    Accept,
    V6,
    Index,
    Beyond,
    Store,
}

/// CPUs the kernel may number (`/sys/devices/system/cpu/possible`, "0-N"): one more than
/// the highest; a CPU beyond it would count in the unread slot.
fn possible_cpus() -> u32 {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let highest = text
        .trim()
        .split([',', '-'])
        .filter_map(|n| n.parse::<u32>().ok())
        .max();
    match highest {
        Some(h) => h + 1,
        // SAFETY: sysconf reads a constant.
        None => unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1) as u32,
    }
}

/// The counts' map, mapped read-only into this process.
struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is shared memory read with atomic loads only; it lives until drop.
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// The filter attached to a receiver's sockets, and its counts. Dropping it unmaps the
/// counts and closes the program's and map's descriptors; the sockets still hold the
/// program until they close.
pub struct TosFilter {
    counts: Mapped,
    cpus: u32,
    matching: Match,
    _map: OwnedFd,
    prog: OwnedFd,
}

impl TosFilter {
    /// Loads the filter for the pps test's `cookie` and `flows` and attaches it to every
    /// one of `sockets`. An error (BPF refused: no CAP_BPF, a locked-down kernel) leaves
    /// no socket filtered.
    pub fn attach(sockets: &[RawFd], cookie: u32, flows: u32) -> io::Result<TosFilter> {
        TosFilter::attach_matching(sockets, Match::Pps { cookie, flows })
    }

    /// Loads the filter counting the datagrams `matching` takes and attaches it to every
    /// one of `sockets`, as [`attach`](Self::attach).
    pub fn attach_matching(sockets: &[RawFd], matching: Match) -> io::Result<TosFilter> {
        let cpus = possible_cpus();
        let slots = cpus * 256 + 1;
        let mut a = MapCreate {
            map_type: BPF_MAP_TYPE_ARRAY,
            key_size: 4,
            value_size: 8,
            max_entries: slots,
            map_flags: BPF_F_MMAPABLE,
        };
        let map = bpf(BPF_MAP_CREATE, &mut a).map(owned)?;
        // SAFETY: sysconf reads a constant.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let len = (slots as usize * 8).div_ceil(page) * page;
        // SAFETY: mapping a BPF array the kernel sized to at least `len` bytes.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                map.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let counts = Mapped { ptr, len };
        let insns = program(matching, cpus, map.as_raw_fd());
        let prog = load_prog(
            BPF_PROG_TYPE_SOCKET_FILTER,
            0,
            PROG_NAME,
            "the TOS filter",
            &insns,
        )?;
        let filter = TosFilter {
            counts,
            cpus,
            matching,
            _map: map,
            prog,
        };
        for (i, &fd) in sockets.iter().enumerate() {
            if let Err(e) = filter.attach_to(fd) {
                for &done in &sockets[..i] {
                    detach(done);
                }
                return Err(e);
            }
        }
        Ok(filter)
    }

    fn attach_to(&self, fd: RawFd) -> io::Result<()> {
        let prog = self.prog.as_raw_fd();
        crate::int_option::set_level_int(fd, libc::SOL_SOCKET, SO_ATTACH_BPF, prog)
    }

    /// Which datagrams it counts.
    pub fn matching(&self) -> Match {
        self.matching
    }

    /// The program's kernel id (for a test to see it gone).
    pub fn prog_id(&self) -> io::Result<u32> {
        Ok(prog_info(self.prog.as_raw_fd())?.id)
    }

    /// `(tos, datagrams)` for every byte counted so far, and those counted on a CPU
    /// beyond the possible count (their TOS unread).
    pub fn snapshot(&self) -> (Vec<(u8, u64)>, u64) {
        let slots = self.counts.ptr as *const AtomicU64;
        // SAFETY: the mapping holds cpus * 256 + 1 aligned u64s the kernel adds to.
        let at = |i: u32| unsafe { &*slots.add(i as usize) }.load(Ordering::Relaxed);
        let mut by = [0u64; 256];
        for cpu in 0..self.cpus {
            for (tos, n) in by.iter_mut().enumerate() {
                *n += at(cpu * 256 + tos as u32);
            }
        }
        let seen = (0..=255u8)
            .map(|t| (t, by[usize::from(t)]))
            .filter(|&(_, n)| n > 0);
        (seen.collect(), at(self.cpus * 256))
    }
}

/// Takes any filter off `fd` (the undoing of a partial attach).
fn detach(fd: RawFd) {
    let _ = crate::int_option::set_level_int(fd, libc::SOL_SOCKET, libc::SO_DETACH_FILTER, 0);
}

/// The start of `struct bpf_prog_info`: what a test needs of a program.
#[repr(C)]
#[derive(Default)]
struct ProgInfo {
    prog_type: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
    load_time: u64,
    created_by_uid: u32,
    nr_map_ids: u32,
    map_ids: u64,
    name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct InfoByFd {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

#[repr(C)]
#[derive(Default)]
struct ById {
    id: u32,
    next_id: u32,
    open_flags: u32,
}

fn prog_info(fd: RawFd) -> io::Result<ProgInfo> {
    let mut info = ProgInfo::default();
    let mut a = InfoByFd {
        bpf_fd: fd as u32,
        info_len: std::mem::size_of::<ProgInfo>() as u32,
        info: &mut info as *mut ProgInfo as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a)?;
    Ok(info)
}

/// Whether program `id` is still loaded.
pub fn prog_exists(id: u32) -> io::Result<bool> {
    let mut a = ById {
        id,
        ..Default::default()
    };
    match bpf(BPF_PROG_GET_FD_BY_ID, &mut a) {
        Ok(fd) => {
            drop(owned(fd));
            Ok(true)
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The ids of the programs named [`PROG_NAME`] loaded in the kernel now (any process's).
pub fn loaded_filters() -> io::Result<Vec<u32>> {
    let mut ids = Vec::new();
    let mut at = 0;
    loop {
        let mut a = ById {
            id: at,
            ..Default::default()
        };
        match bpf(BPF_PROG_GET_NEXT_ID, &mut a) {
            Ok(_) => at = a.next_id,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(ids),
            Err(e) => return Err(e),
        }
        let mut by = ById {
            id: at,
            ..Default::default()
        };
        // A program unloaded between the two calls is not ours to count.
        let Ok(fd) = bpf(BPF_PROG_GET_FD_BY_ID, &mut by).map(owned) else {
            continue;
        };
        let info = prog_info(fd.as_raw_fd())?;
        let end = info.name.iter().position(|&b| b == 0).unwrap_or(16);
        if &info.name[..end] == PROG_NAME.as_bytes() {
            ids.push(at);
        }
    }
}

#[cfg(test)]
#[path = "filter_tests.rs"]
mod tests;
