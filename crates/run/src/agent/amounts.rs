//! How a limit's refusal writes an amount, shared by the limits and the account.

/// A rate in SI units: `2.5G`.
pub(crate) fn si(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{:.3}G", v / 1e9),
        v if v >= 1e6 => format!("{:.3}M", v / 1e6),
        v if v >= 1e3 => format!("{:.3}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

/// A size in MiB.
pub(crate) fn bytes(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}
