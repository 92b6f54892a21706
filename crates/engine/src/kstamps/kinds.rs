//! Which kind each stamp read was, as the kernel marked it: a `scm_timestamping` holds
//! three timespecs, `ts[0]` the software stamp (system clock), `ts[1]` unused, `ts[2]`
//! the raw hardware one (the NIC's PTP clock), each zero when not taken. Counted by the
//! thread that reads them (a thread-local increment, as `crate::syscalls`), so that a
//! document says how many hardware stamps were really read, never that a NIC stamped
//! what it did not.

use std::cell::Cell;
use std::mem::size_of;

/// Stamps read, by kind (one control message may hold both).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StampKinds {
    pub software: u64,
    pub hardware: u64,
}

impl std::ops::AddAssign for StampKinds {
    fn add_assign(&mut self, o: StampKinds) {
        self.software += o.software;
        self.hardware += o.hardware;
    }
}

thread_local! {
    static READ: Cell<StampKinds> = const { Cell::new(StampKinds { software: 0, hardware: 0 }) };
}

/// Whether a `scm_timestamping` (`data`) holds a software and a hardware stamp.
pub fn classify(data: &[u8]) -> (bool, bool) {
    let ts = size_of::<libc::timespec>();
    let set = |i: usize| {
        data.get(i * ts..(i + 1) * ts).is_some_and(|b| {
            // SAFETY: `b` holds one timespec the kernel wrote; read unaligned.
            let t: libc::timespec = unsafe { std::ptr::read_unaligned(b.as_ptr().cast()) };
            t.tv_sec != 0 || t.tv_nsec != 0
        })
    };
    (set(0), set(2))
}

/// Counts the kinds of one `scm_timestamping` this thread read.
#[inline]
pub(crate) fn note(data: &[u8]) {
    let (sw, hw) = classify(data);
    READ.with(|c| {
        let mut k = c.get();
        k.software += u64::from(sw);
        k.hardware += u64::from(hw);
        c.set(k);
    });
}

/// This thread's stamps read so far (a worker thread counts from its start).
pub fn so_far() -> StampKinds {
    READ.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scm(sw: (i64, i64), hw: (i64, i64)) -> Vec<u8> {
        let mut v = Vec::new();
        for (s, n) in [sw, (0, 0), hw] {
            let t = libc::timespec {
                tv_sec: s,
                tv_nsec: n,
            };
            // SAFETY: a timespec is plain data.
            let b: [u8; size_of::<libc::timespec>()] = unsafe { std::mem::transmute(t) };
            v.extend_from_slice(&b);
        }
        v
    }

    /// The software stamp is the first, the raw hardware one the third; a zero one was
    /// not taken, and a short message holds none.
    #[test]
    fn each_stamp_is_the_kind_the_kernel_marked() {
        assert_eq!(classify(&scm((5, 1), (0, 0))), (true, false));
        assert_eq!(classify(&scm((0, 0), (7, 0))), (false, true));
        assert_eq!(classify(&scm((5, 0), (0, 9))), (true, true));
        assert_eq!(classify(&scm((0, 0), (0, 0))), (false, false));
        assert_eq!(classify(&scm((5, 0), (7, 0))[..16]), (true, false));
        let before = so_far();
        note(&scm((5, 0), (0, 9)));
        note(&scm((5, 0), (0, 0)));
        let after = so_far();
        assert_eq!(after.software - before.software, 2);
        assert_eq!(after.hardware - before.hardware, 1);
    }

    /// A socket that asks for the NIC's receive stamps on a device that takes none (lo)
    /// reads software stamps only, and says so.
    #[test]
    fn asking_for_hardware_stamps_counts_only_those_taken() {
        use std::net::UdpSocket;
        use std::os::fd::AsRawFd;
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let v = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sampling = crate::kstamps::Sampling::new(4).with_hardware_rx(true);
        sampling.enable(v.as_raw_fd()).unwrap();
        // Switching receive stamps on is deferred to a kernel work item.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let before = so_far();
        let mut buf = [0u8; 64];
        for _ in 0..3 {
            u.send_to(&[1u8; 20], v.local_addr().unwrap()).unwrap();
            let (_, at) =
                crate::kstamps::recv_stamped(v.as_raw_fd(), &mut buf, false, None).unwrap();
            assert!(at.is_some(), "a software stamp");
        }
        let after = so_far();
        assert_eq!(after.software - before.software, 3);
        assert_eq!(
            after.hardware, before.hardware,
            "lo stamps nothing in hardware"
        );
    }
}
