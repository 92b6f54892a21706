//! Pinning the calling thread to one CPU, or to a set of them.

use std::io;

pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} out of range"),
        ));
    }
    // SAFETY: cpu_set_t is plain data and the size passed is its own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The CPUs the calling thread may run on.
pub fn current_mask() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data and the size passed is its own.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        set
    };
    // SAFETY: reading bits of a filled set.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Lets the calling thread run on `cpus` only.
pub fn set_current_mask(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data and the size passed is its own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The CPU the calling thread runs on now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: no arguments, no memory.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_to_an_allowed_cpu() {
        std::thread::spawn(|| {
            let all = current_mask().unwrap();
            pin_current_thread(0).unwrap();
            assert_eq!(current_cpu(), Some(0));
            assert!(pin_current_thread(1 << 20).is_err());
            assert_eq!(current_mask().unwrap(), vec![0]);
            set_current_mask(&all).unwrap();
            assert_eq!(current_mask().unwrap(), all);
            assert!(set_current_mask(&[]).is_err(), "an empty set is refused");
        })
        .join()
        .unwrap();
    }
}
