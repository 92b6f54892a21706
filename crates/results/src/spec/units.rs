//! Values as people write them on a command line or in a suite file: durations (`2.5`,
//! `500ms`), sizes (`128K`), bit rates (`2.5G`), percentages and ratios; each parser says
//! what it expected.

/// A value that does not read as the unit a flag or suite entry takes; each names the text
/// and gives an example of what is read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("'{0}' is not a duration (e.g. 10, 2.5, 500ms)")]
    NotDuration(String),
    #[error("'{0}' is out of range")]
    OutOfRange(String),
    #[error("'{0}' is not a period (e.g. 30s, 10m, 1h)")]
    NotPeriod(String),
    #[error("'{0}' is not a size (e.g. 65536, 128K, 4M)")]
    NotSize(String),
    #[error("'{0}' is not a size (e.g. 512M, 4G)")]
    NotBytes(String),
    #[error("'{0}' is too large")]
    TooLarge(String),
    #[error("'{0}' is not a bit rate (e.g. 100M, 2.5G, 1000000)")]
    NotBitRate(String),
    #[error("'{0}' is not a percentage")]
    NotPercent(String),
    #[error("'{0}' is not a ratio of at least 1")]
    NotRatio(String),
    #[error("'{0}' is not above zero")]
    NotAboveZero(String),
    #[error("'{0}' is not a positive number")]
    NotPositive(String),
}

/// Seconds as a decimal number, or with an `ms` / `s` suffix; returns milliseconds.
pub fn parse_duration_ms(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let (num, scale) = if let Some(v) = t.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = t.strip_suffix('s') {
        (v, 1000.0)
    } else {
        (t, 1000.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| UnitError::NotDuration(s.to_string()))?;
    if !v.is_finite() || v < 0.0 || v * scale > 1e12 {
        return Err(UnitError::OutOfRange(s.to_string()));
    }
    Ok((v * scale).round() as u64)
}

/// A period as people write one: seconds as a number, or with an `ms`, `s`, `m` or `h`
/// suffix (`30s`, `10m`, `1h`); returns milliseconds.
pub fn parse_period_ms(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let scaled = |v: &str, by: u64| parse_duration_ms(v).map(|ms| ms.saturating_mul(by));
    let ms = if t.ends_with("ms") || t.ends_with('s') {
        parse_duration_ms(t)
    } else if let Some(v) = t.strip_suffix('m') {
        scaled(v, 60)
    } else if let Some(v) = t.strip_suffix('h') {
        scaled(v, 3600)
    } else {
        parse_duration_ms(t)
    };
    ms.map_err(|_| UnitError::NotPeriod(s.to_string()))
}

/// Bytes, with an optional K/M/G suffix in powers of 1024 (as iperf3 and ntttcp read -l).
pub fn parse_size(s: &str) -> Result<u32, UnitError> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let v: u64 = num.parse().map_err(|_| UnitError::NotSize(s.to_string()))?;
    v.checked_mul(mult)
        .and_then(|b| u32::try_from(b).ok())
        .ok_or_else(|| UnitError::TooLarge(s.to_string()))
}

/// Bits per second with an optional k/M/G/T suffix in powers of 1000 (as iperf3's -b):
/// `2.5G`; `none` (no cap) where a flag allows it reads as infinity.
pub fn parse_bits(s: &str) -> Result<f64, UnitError> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("none") {
        return Ok(f64::INFINITY);
    }
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1e3),
        Some('M') => (&t[..t.len() - 1], 1e6),
        Some('G') => (&t[..t.len() - 1], 1e9),
        Some('T') => (&t[..t.len() - 1], 1e12),
        _ => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v * mult),
        _ => Err(UnitError::NotBitRate(s.to_string())),
    }
}

/// Bytes as a u64, with an optional K/M/G/T suffix in powers of 1024.
pub fn parse_bytes(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let (num, shift) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 10),
        Some('M') => (&t[..t.len() - 1], 20),
        Some('G') => (&t[..t.len() - 1], 30),
        Some('T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let v: u64 = num
        .parse()
        .map_err(|_| UnitError::NotBytes(s.to_string()))?;
    v.checked_mul(1 << shift)
        .ok_or_else(|| UnitError::TooLarge(s.to_string()))
}

/// A non-negative percentage, with or without a `%` sign.
pub fn parse_percent(s: &str) -> Result<f64, UnitError> {
    let v: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| UnitError::NotPercent(s.to_string()))?;
    if !(v >= 0.0 && v.is_finite()) {
        return Err(UnitError::NotPercent(s.to_string()));
    }
    Ok(v)
}

/// A ratio of at least 1 (an answer's size to its request's).
pub fn parse_ratio(s: &str) -> Result<f64, UnitError> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 1.0 => Ok(v),
        _ => Err(UnitError::NotRatio(s.to_string())),
    }
}

/// A period as [`parse_period_ms`] reads one, above zero (a zero timeout would lose every
/// probe, a zero window keep none).
pub fn parse_period_above_zero(s: &str) -> Result<std::time::Duration, UnitError> {
    match parse_period_ms(s)? {
        0 => Err(UnitError::NotAboveZero(s.to_string())),
        ms => Ok(std::time::Duration::from_millis(ms)),
    }
}

/// A finite number above zero (a rate).
pub fn parse_positive(s: &str) -> Result<f64, UnitError> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(UnitError::NotPositive(s.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_above_zero_and_positive_numbers() {
        assert_eq!(
            parse_period_above_zero("0.3"),
            Ok(std::time::Duration::from_millis(300))
        );
        let e = parse_period_above_zero("0ms").unwrap_err().to_string();
        assert_eq!(e, "'0ms' is not above zero");
        assert!(parse_period_above_zero("soon").is_err());
        assert_eq!(parse_positive("2.5"), Ok(2.5));
        for bad in ["0", "-1", "inf", "x"] {
            let e = parse_positive(bad).unwrap_err().to_string();
            assert_eq!(e, format!("'{bad}' is not a positive number"));
        }
    }

    #[test]
    fn periods() {
        assert_eq!(parse_period_ms("30s"), Ok(30_000));
        assert_eq!(parse_period_ms("10m"), Ok(600_000));
        assert_eq!(parse_period_ms("1.5h"), Ok(5_400_000));
        assert_eq!(parse_period_ms("250ms"), Ok(250));
        assert_eq!(parse_period_ms("45"), Ok(45_000));
        let e = parse_period_ms("10 minutes").unwrap_err().to_string();
        assert!(e.contains("e.g. 30s, 10m, 1h"), "{e}");
    }

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration_ms("10"), Ok(10_000));
        assert_eq!(parse_duration_ms("2.5"), Ok(2_500));
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("3s"), Ok(3_000));
        assert!(parse_duration_ms("-1").is_err());
        assert!(parse_duration_ms("abc").is_err());
        assert_eq!(parse_size("128K"), Ok(131_072));
        assert_eq!(parse_size("4m"), Ok(4 << 20));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("5G").is_err());
        assert!(parse_size("x").is_err());
    }

    #[test]
    fn percentages_and_ratios() {
        assert_eq!(parse_percent("5%"), Ok(5.0));
        assert_eq!(parse_percent("0.5"), Ok(0.5));
        assert!(parse_percent("-1").is_err() && parse_percent("inf").is_err());
        assert_eq!(parse_ratio("1"), Ok(1.0));
        assert!(parse_ratio("0.5").is_err() && parse_ratio("x").is_err());
    }
}
