//! The data plane's own system calls, counted by the thread that makes them where it makes
//! them (a thread-local increment, no atomic): what `syscalls_per_message` reports for the
//! kernel and io_uring engines. The benchmark checks the count against the kernel's own
//! (`perf stat -e raw_syscalls:sys_enter`, BENCHMARKS.md).

use std::cell::Cell;

thread_local! {
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

/// One more system call on this thread.
#[inline]
pub(crate) fn one() {
    CALLS.with(|c| c.set(c.get() + 1));
}

/// This thread's system calls so far (a worker thread counts from its start).
pub(crate) fn so_far() -> u64 {
    CALLS.with(Cell::get)
}
