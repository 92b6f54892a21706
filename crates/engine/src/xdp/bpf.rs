//! The bpf(2) calls the AF_XDP engine needs, made directly: an XSKMAP, the redirect
//! program, and a BPF link that attaches it to an interface. A link (not a netlink attach)
//! is what makes cleanup certain: the kernel detaches the program when the link's last
//! descriptor closes, so a killed process leaves nothing attached.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::asm::{self, Insn, Steer};

pub(crate) const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
pub(crate) const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_LINK_CREATE: libc::c_int = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// How the program runs on the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver, before an skb exists.
    Native,
    /// After the skb is built (any driver; slower).
    Generic,
}

impl AttachMode {
    pub fn name(self) -> &'static str {
        match self {
            AttachMode::Native => "native",
            AttachMode::Generic => "generic",
        }
    }
    fn flags(self) -> u32 {
        match self {
            AttachMode::Native => XDP_FLAGS_DRV_MODE,
            AttachMode::Generic => XDP_FLAGS_SKB_MODE,
        }
    }
}

/// The redirect program attached to one interface; dropping it detaches the program.
pub struct Attached {
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    pub mode: AttachMode,
    pub ifindex: u32,
}

pub(crate) fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<RawFd> {
    // SAFETY: attr is a live, initialised bpf_attr variant of its own size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T,
            std::mem::size_of::<T>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as RawFd)
}

pub(crate) fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: bpf(2) has just returned this descriptor to us alone.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

#[repr(C)]
#[derive(Default)]
pub(crate) struct MapCreate {
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
}

#[repr(C)]
#[derive(Default)]
struct MapUpdate {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
pub(crate) struct ProgLoad {
    pub prog_type: u32,
    pub insn_cnt: u32,
    pub insns: u64,
    pub license: u64,
    pub log_level: u32,
    pub log_size: u32,
    pub log_buf: u64,
    pub kern_version: u32,
    pub prog_flags: u32,
    pub prog_name: [u8; 16],
    pub prog_ifindex: u32,
    pub expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// An XSKMAP with a slot per receive queue.
fn xskmap(queues: u32) -> io::Result<OwnedFd> {
    let mut a = MapCreate {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: queues.max(1),
        ..Default::default()
    };
    bpf(BPF_MAP_CREATE, &mut a).map(owned)
}

/// Loads `insns` as a program of `prog_type` named `name` (15 bytes at most), expected at
/// `attach_type`; the error names it as `what` and holds the verifier's log.
pub(crate) fn load_prog(
    prog_type: u32,
    attach_type: u32,
    name: &str,
    what: &str,
    insns: &[Insn],
) -> io::Result<OwnedFd> {
    let license = c"GPL";
    let mut log = vec![0u8; 64 * 1024];
    let mut prog_name = [0u8; 16];
    prog_name[..name.len()].copy_from_slice(name.as_bytes());
    let mut a = ProgLoad {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        prog_name,
        expected_attach_type: attach_type,
        ..Default::default()
    };
    // The verifier gives up with EAGAIN when the loading thread has a signal or task
    // work pending (an io_uring completion's notification is one); libbpf tries again
    // too. Five tries, each after that work ran on the way back to user space.
    let mut tries = 5;
    let loaded = loop {
        match bpf(BPF_PROG_LOAD, &mut a) {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && tries > 1 => tries -= 1,
            r => break r,
        }
    };
    loaded.map(owned).map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]);
        io::Error::new(e.kind(), format!("loading {what}: {e}\n{text}"))
    })
}

/// Attaches the redirect program for the UDP packets `steer` names to `ifindex`, with an
/// XSKMAP for `queues` receive queues. `mode` `None`: native, else generic where the
/// driver has no native XDP.
pub fn attach(
    ifindex: u32,
    steer: Steer,
    queues: u32,
    mode: Option<AttachMode>,
) -> io::Result<Attached> {
    let map = xskmap(queues)?;
    let insns = asm::redirect_udp(steer, map.as_raw_fd());
    let prog = load_prog(
        BPF_PROG_TYPE_XDP,
        BPF_XDP,
        "sonde_xsk_r",
        "the XDP program",
        &insns,
    )?;
    let modes: &[AttachMode] = match mode {
        Some(m) => &[m][..],
        None => &[AttachMode::Native, AttachMode::Generic],
    };
    let mut last = None;
    for &m in modes {
        let mut a = LinkCreate {
            prog_fd: prog.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags: m.flags(),
        };
        match bpf(BPF_LINK_CREATE, &mut a) {
            Ok(link) => {
                return Ok(Attached {
                    map,
                    _prog: prog,
                    _link: owned(link),
                    mode: m,
                    ifindex,
                })
            }
            Err(e) => last = Some((m, e)),
        }
    }
    let (m, e) = last.expect("at least one mode is tried");
    Err(io::Error::new(
        e.kind(),
        format!(
            "attaching XDP ({} mode) to interface {ifindex}: {e}",
            m.name()
        ),
    ))
}

impl Attached {
    /// Sends packets arriving on `queue` to the AF_XDP socket `xsk`.
    pub fn route_queue(&self, queue: u32, xsk: RawFd) -> io::Result<()> {
        let (key, value) = (queue, xsk as u32);
        let mut a = MapUpdate {
            map_fd: self.map.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            value: &value as *const u32 as u64,
            ..Default::default()
        };
        bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
    }
}
