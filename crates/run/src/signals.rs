//! Ctrl-C and SIGTERM become a flag that the control loops read, and a byte on a pipe
//! that wakes any `poll` they sleep in, so that a test cut short still reports, everything
//! created is cleaned up, and no loop has to wake up just to look at the flag.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

/// The read end of the wake-up pipe, for `poll` sets (-1 before `install`).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

/// The fd that becomes readable when a stop signal arrives, if installed.
pub fn wake_fd() -> Option<RawFd> {
    let fd = WAKE_FD.load(Ordering::Relaxed);
    (fd >= 0).then_some(fd)
}

#[derive(Clone)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    pub fn install() -> Interrupt {
        let flag = Arc::new(AtomicBool::new(false));
        let pipe = UnixStream::pair().ok();
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // Registration only fails for forbidden signals, which these are not.
            let _ = signal_hook::flag::register(sig, Arc::clone(&flag));
            if let Some((_, w)) = &pipe {
                if let Ok(w) = w.try_clone() {
                    let _ = signal_hook::low_level::pipe::register(sig, w);
                }
            }
        }
        if let Some((r, _w)) = pipe {
            // Both ends live for the whole process: the signal handler writes to a clone.
            WAKE_FD.store(r.as_raw_fd(), Ordering::Relaxed);
            std::mem::forget(r);
            std::mem::forget(_w);
        }
        Interrupt(flag)
    }

    /// A flag no signal sets: for a test, or a library caller with its own handling.
    pub fn none() -> Interrupt {
        Interrupt(Arc::new(AtomicBool::new(false)))
    }

    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the flag, as a stop signal would: for a caller that stops its own loops.
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Sleeps until `at`; false when a stop signal came first. It sleeps in `poll` on the
    /// wake-up pipe when one is installed, and otherwise in steps short enough to notice
    /// `set`.
    pub fn sleep_until(&self, at: std::time::Instant) -> bool {
        const STEP: std::time::Duration = std::time::Duration::from_millis(100);
        loop {
            if self.is_set() {
                return false;
            }
            let left = at.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return true;
            }
            match wake_fd() {
                Some(fd) => {
                    let mut p = libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // A signal leaves its byte in the pipe; the flag, set first, ends the
                    // loop above. The step bounds the sleep should `set` be called instead.
                    let ms = left.min(STEP * 10).as_millis() as libc::c_int;
                    // SAFETY: one valid pollfd for the duration of the call.
                    unsafe { libc::poll(&mut p, 1, ms.max(1)) };
                }
                None => std::thread::sleep(left.min(STEP)),
            }
        }
    }
}
