//! CPU time of this process (all threads), for CPU seconds per test.

/// User + system CPU seconds used by this process so far (getrusage RUSAGE_SELF).
pub fn cpu_seconds() -> Option<f64> {
    // SAFETY: getrusage fills a plain struct.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
            return None;
        }
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Some(tv(ru.ru_utime) + tv(ru.ru_stime))
}

#[cfg(test)]
mod tests {
    #[test]
    fn grows_with_work() {
        let a = super::cpu_seconds().unwrap();
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed().as_millis() < 30 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(super::cpu_seconds().unwrap() > a);
    }
}
