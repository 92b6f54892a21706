//! The HMACs a test's code computed or checked on its thread (each a SHA-256 over the
//! key's pads and the bytes: most of the mesh's cost per packet beside the system calls).

thread_local! {
    static MACS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// One HMAC computed or checked (`StampKey::mac`, `StampKey::verify`).
pub(crate) fn count() {
    MACS.with(|c| c.set(c.get() + 1));
}

/// How many HMACs `f` computed or checked.
pub(crate) fn macs_in<T>(f: impl FnOnce() -> T) -> (T, u32) {
    let before = MACS.with(|c| c.get());
    let out = f();
    (out, MACS.with(|c| c.get()) - before)
}
