//! Fresh random bytes from the kernel's CSPRNG (getrandom), for nonces and cookies. It does
//! not fail once the pool is initialised, which it is long before sonde runs a test.

use std::io;

/// Fills `buf` with random bytes.
pub fn fill(buf: &mut [u8]) {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: writes at most the remaining length into buf.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n > 0 {
            filled += n as usize;
        } else if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            panic!("getrandom failed: {}", io::Error::last_os_error());
        }
    }
}

pub fn u64() -> u64 {
    let mut b = [0u8; 8];
    fill(&mut b);
    u64::from_ne_bytes(b)
}

/// A nonce for one side of a control handshake.
pub fn nonce() -> [u8; sonde_proto::CHALLENGE_BYTES] {
    let mut n = [0u8; sonde_proto::CHALLENGE_BYTES];
    fill(&mut n);
    n
}
