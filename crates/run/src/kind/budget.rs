//! What a test costs the agent in memory, estimated from its spec before anything is
//! opened, so that a budget can refuse it up front. Each figure is an upper bound of what
//! the side allocates or makes the kernel allocate, not a measurement.

/// A worker thread's stack: Rust's default reservation, which a deep call touches. Measured:
/// 256 echo workers took 479 MB of RSS, 1.9 MB each.
pub const THREAD_BYTES: u64 = 2 << 20;
/// A TCP socket without SO_SNDBUF/SO_RCVBUF: the kernel's default tcp_rmem + tcp_wmem
/// (128 KiB + 16 KiB), doubled for its bookkeeping, rounded up.
pub const SOCKET_BYTES: u64 = 320 << 10;
/// A request worker's latency histograms (hdrhistogram, 3 significant figures over
/// 1 ns..60 s: 27,648 counts of 8 bytes): the one it records into and two spares
/// (`rr_client::handoff`).
pub const HISTOGRAM_BYTES: u64 = 3 * (216 << 10);
/// An AF_XDP socket's UMEM (8192 frames of 2 KiB) and its four rings.
pub const XSK_BYTES: u64 = (8192 * 2048) + 4 * 2048 * 16;

/// A socket with the spec's buffer sizes: the kernel doubles each one asked for.
pub fn socket_bytes(sndbuf: Option<u32>, rcvbuf: Option<u32>) -> u64 {
    match (sndbuf, rcvbuf) {
        (None, None) => SOCKET_BYTES,
        (s, r) => 2 * (u64::from(s.unwrap_or(16 << 10)) + u64::from(r.unwrap_or(128 << 10))),
    }
}

/// `threads` workers' stacks and `per_thread` bytes each, plus `units` x `per_unit`; never
/// wraps (a peer's counts are not validated yet when the limits read them).
pub fn total(threads: usize, per_thread: u64, units: u32, per_unit: u64) -> u64 {
    (threads as u64)
        .saturating_mul(THREAD_BYTES.saturating_add(per_thread))
        .saturating_add(u64::from(units).saturating_mul(per_unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_wraps() {
        assert_eq!(total(usize::MAX, u64::MAX, u32::MAX, u64::MAX), u64::MAX);
        assert_eq!(total(2, 0, 1, 10), 2 * THREAD_BYTES + 10);
        assert_eq!(socket_bytes(Some(1000), None), 2 * (1000 + (128 << 10)));
    }
}
