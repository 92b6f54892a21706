//! The machine-wide timing lock: tests that send traffic hold it (exclusive), the untimed
//! pass of scripts/test.sh shares it.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;

/// Held while a test sends traffic: tests that measure rates, searches or latency never
/// run at the same time, in this process or another (a flock on one file: exclusive, or shared in the untimed pass).
pub struct Serial(File, std::time::Instant, u64);

/// Where each hold of the lock is logged (`SECONDS TEST STEAL_MS` a line: the hypervisor's
/// steal over the hold, [`super::steal`]), when set: CI's list of the tests that hold the
/// machine's serialized time, and of those the hypervisor held back (.ci/run).
const HOLDS_LOG_ENV: &str = "SONDE_TEST_HOLDS_LOG";

/// Set by scripts/test.sh for its pass of the untimed tests (attacks, refusals, clean-up:
/// what they assert does not depend on the machine's speed): they share the lock, so they
/// run beside each other but never beside a timed test, which holds it alone.
const SHARED_ENV: &str = "SONDE_TEST_LOCK_SHARED";

impl Serial {
    pub fn take() -> Serial {
        let f = File::create(std::env::temp_dir().join("sonde-timing-tests.lock")).unwrap();
        let mode = match std::env::var_os(SHARED_ENV) {
            Some(v) if v == "1" => libc::LOCK_SH,
            _ => libc::LOCK_EX,
        };
        // SAFETY: a valid fd; the lock is released when the file is closed.
        let r = unsafe { libc::flock(f.as_raw_fd(), mode) };
        assert_eq!(r, 0, "flock: {}", std::io::Error::last_os_error());
        Serial(f, std::time::Instant::now(), super::steal::steal_ms())
    }
}

impl Drop for Serial {
    fn drop(&mut self) {
        let Some(path) = std::env::var_os(HOLDS_LOG_ENV) else {
            return;
        };
        // The test harness names each test's thread after the test.
        let name = std::thread::current().name().unwrap_or("?").to_string();
        let stolen = super::steal::steal_ms().saturating_sub(self.2);
        let line = format!("{:.2} {name} {stolen}\n", self.1.elapsed().as_secs_f64());
        // One append of one short line: lines of concurrent holders do not interleave.
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
        {
            let _ = f.write_all(line.as_bytes());
        }
    }
}
