//! Small statistics used by the result document.

/// Mean and population standard deviation; `None` for an empty slice.
pub fn mean_stddev(values: &[f64]) -> Option<(f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    Some((mean, var.sqrt()))
}

/// Bits per second from bytes over seconds; 0 for an empty window.
pub fn bits_per_second(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_stddev() {
        let (m, s) = mean_stddev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(m, 5.0);
        assert_eq!(s, 2.0);
        assert!(mean_stddev(&[]).is_none());
    }

    #[test]
    fn rate() {
        assert_eq!(bits_per_second(125_000_000, 1.0), 1e9);
        assert_eq!(bits_per_second(1, 0.0), 0.0);
    }
}
