//! The AF_XDP engine's kernel side: the XDP program that steers the test's own UDP flows
//! to AF_XDP sockets (everything else goes on to the kernel), the BPF link that attaches
//! it, and the sockets with their UMEM and rings.
//!
//! Made with raw syscalls rather than libxdp/libbpf bindings or a loader crate: the
//! program is twenty-odd instructions (no C toolchain needed to build sonde), a BPF link
//! detaches it when the process dies however it dies, and the rings are a few atomics.

mod asm;
pub(crate) mod bpf;
pub mod frame;
pub mod pps;
mod ring;
pub mod rr_client;
pub mod rr_server;
mod xsk;

pub(crate) use asm::{op, Asm, Insn};
pub use asm::{Port, Steer, SteerError, LOWEST_PORT};
pub use bpf::{attach, AttachMode, Attached};
pub use xsk::{Xsk, XskConfig, XskStats};

/// A worker takes socket `k` of its engine's for its life.
pub(crate) fn socket_of(
    xsks: &[std::sync::Mutex<Xsk>],
    k: usize,
) -> Result<std::sync::MutexGuard<'_, Xsk>, crate::pool::WorkerError> {
    xsks[k]
        .lock()
        .map_err(|_| crate::pool::WorkerError::SocketPoisoned(k))
}

/// The interface index of `name`, in this thread's network namespace.
pub fn ifindex(name: &str) -> std::io::Result<u32> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "interface name"))?;
    // SAFETY: c is a live NUL-terminated string.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(std::io::Error::last_os_error()),
        i => Ok(i),
    }
}

/// Whether this process may open AF_XDP sockets (the kernel has them, and the process has
/// the capability): a socket is opened and closed.
pub fn available() -> std::io::Result<()> {
    // SAFETY: a plain socket(2) call; the descriptor is closed at once.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just opened by us.
    unsafe { libc::close(fd) };
    Ok(())
}
