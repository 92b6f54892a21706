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
}
