//! Unit formatting for people. Machine output keeps raw SI values with the unit in the name.

/// `31.42 Gbit/s`, `940.1 Mbit/s`, ... (SI, powers of 1000, as network rates are quoted).
pub fn bits_per_second(bps: f64) -> String {
    let (v, unit) = if bps >= 1e9 {
        (bps / 1e9, "Gbit/s")
    } else if bps >= 1e6 {
        (bps / 1e6, "Mbit/s")
    } else if bps >= 1e3 {
        (bps / 1e3, "kbit/s")
    } else {
        (bps, "bit/s")
    };
    format!("{v:.2} {unit}")
}

/// `1.25 GB`, `310.4 MB` (SI).
pub fn bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{b} B")
    }
}

/// `v` to three significant digits, with thousands separators: `12,100`, `15.0`, `0.0123`.
/// What a published table shows: more digits than the measurement's noise is noise.
pub fn sig3(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let magnitude = v.abs().log10().floor() as i32;
    if magnitude >= 2 {
        let step = 10f64.powi(magnitude - 2);
        return thousands(((v / step).round() * step) as i64);
    }
    let decimals = (2 - magnitude) as usize;
    format!("{v:.decimals$}")
}

/// `1,049,731`: an exact count, grouped by thousands.
pub fn thousands(v: i64) -> String {
    let digits = v.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0 {
        out.insert(0, '-');
    }
    out
}

/// Microseconds as milliseconds (`0.110 ms`, `12.5 ms`): to the microsecond below 1 ms,
/// where TCP's RTTs on one host or LAN are.
pub fn ms(us: f64) -> String {
    let v = us / 1e3;
    let decimals = match v {
        v if v >= 100.0 => 0,
        v if v >= 10.0 => 1,
        v if v >= 1.0 => 2,
        _ => 3,
    };
    format!("{v:.decimals$} ms")
}

pub fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "n/a".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(bits_per_second(31.4159e9), "31.42 Gbit/s");
        assert_eq!(bits_per_second(940.1e6), "940.10 Mbit/s");
        assert_eq!(bits_per_second(12.0), "12.00 bit/s");
        assert_eq!(bytes(1_250_000_000), "1.25 GB");
        assert_eq!(bytes(999), "999 B");
        assert_eq!(opt(None::<u64>, |v| v.to_string()), "n/a");
        assert_eq!(sig3(12080.243), "12,100");
        assert_eq!(sig3(15.046), "15.0");
        assert_eq!(ms(3.0), "0.003 ms");
        assert_eq!(ms(12_480.0), "12.5 ms");
        assert_eq!(sig3(79.935), "79.9");
        assert_eq!(sig3(999.6), "1,000");
        assert_eq!(sig3(0.012345), "0.0123");
        assert_eq!(sig3(-1234.0), "-1,230");
        assert_eq!(sig3(0.0), "0");
        assert_eq!(thousands(1_049_731), "1,049,731");
        assert_eq!(thousands(-999), "-999");
    }
}
