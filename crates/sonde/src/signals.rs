//! Ctrl-C and SIGTERM become a flag that the control loops read between waits, so that a
//! test cut short still reports, and everything created is cleaned up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Clone)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    pub fn install() -> Interrupt {
        let flag = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // Registration only fails for forbidden signals, which these are not.
            let _ = signal_hook::flag::register(sig, Arc::clone(&flag));
        }
        Interrupt(flag)
    }

    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
