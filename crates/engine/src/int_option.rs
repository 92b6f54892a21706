//! One int socket option at any level: the one `setsockopt` the marks, the datagram stamps
//! and the socket options share, below all three so that none imports another for it.

use std::io;
use std::mem::size_of;
use std::os::fd::RawFd;

/// An int socket option at any level (IP_TOS, IPV6_TCLASS, SO_TIMESTAMPING, IP_RECVTTL...).
pub(crate) fn set_level_int(
    fd: RawFd,
    level: i32,
    name: i32,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a c_int that lives for the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
