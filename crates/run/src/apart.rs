//! Keeps a side's control thread (interval reports, the control connection) off the CPUs
//! its measuring workers are pinned to, for as long as the side lives, where the process
//! may run elsewhere; and says where it ran, so that a reader knows when it could not.

use sonde_engine::affinity::{current_mask, set_current_mask};
use sonde_engine::Placement;
use sonde_results::ControlThread;

/// The control thread's CPUs for a test, restored when dropped.
pub(crate) struct Apart {
    /// The mask to restore, when it was changed.
    saved: Option<Vec<usize>>,
    cpus: Vec<usize>,
    apart: bool,
}

impl Apart {
    /// Moves the calling thread off `placement`'s pinned CPUs when some other CPU of its
    /// mask remains. Unpinned workers may run anywhere, so nothing is apart from them.
    pub fn keep(placement: &Placement) -> Apart {
        let mask = current_mask().unwrap_or_default();
        let free = free_of(placement).unwrap_or_default();
        if free.is_empty() || set_current_mask(&free).is_err() {
            return Apart {
                saved: None,
                cpus: mask,
                apart: false,
            };
        }
        Apart {
            saved: Some(mask),
            cpus: free,
            apart: true,
        }
    }

    /// Where the control thread was allowed during the window, into its record.
    pub fn describe(&self, control: &mut ControlThread) {
        control.cpus = self.cpus.clone();
        control.apart = self.apart;
    }
}

/// The CPUs the calling thread may use apart from `placement`'s pinned workers'; `None`
/// when the workers are not pinned (they may run anywhere).
pub(crate) fn free_of(placement: &Placement) -> Option<Vec<usize>> {
    let workers = placement.pinned()?;
    let mask = current_mask().unwrap_or_default();
    Some(mask.into_iter().filter(|c| !workers.contains(c)).collect())
}

impl Drop for Apart {
    fn drop(&mut self) {
        if let Some(mask) = &self.saved {
            let _ = set_current_mask(mask);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a thread of its own, so that masks set here never leak into others.
    fn on_thread(f: impl FnOnce() + Send + 'static) {
        std::thread::spawn(f).join().unwrap();
    }

    #[test]
    fn moves_off_the_workers_cpus_and_back() {
        on_thread(|| {
            let mask = current_mask().unwrap();
            if mask.len() < 2 {
                eprintln!("SKIPPED: needs 2 CPUs");
                return;
            }
            let placement = Placement::new(1, Some(vec![mask[0]]), 1);
            {
                let apart = Apart::keep(&placement);
                assert_eq!(current_mask().unwrap(), mask[1..].to_vec());
                let mut c = ControlThread::default();
                apart.describe(&mut c);
                assert!(c.apart);
                assert_eq!(c.cpus, mask[1..].to_vec());
            }
            assert_eq!(current_mask().unwrap(), mask, "restored when dropped");
        });
    }

    #[test]
    fn stays_and_says_so_when_there_is_nowhere_else() {
        on_thread(|| {
            let mask = current_mask().unwrap();
            let everywhere = Placement::new(mask.len(), Some(mask.clone()), mask.len());
            let apart = Apart::keep(&everywhere);
            let mut c = ControlThread::default();
            apart.describe(&mut c);
            assert!(!c.apart);
            assert_eq!(current_mask().unwrap(), mask);
            let unpinned = Apart::keep(&Placement::new(1, None, 1));
            unpinned.describe(&mut c);
            assert!(!c.apart, "unpinned workers may share any CPU");
        });
    }
}
