//! What the server admits, decided without I/O: a connection from outside the allowlist
//! is closed unread; beyond `max_connections` one more is answered (503, naming the limit)
//! and closed, and beyond that few more simply closed; the bytes of every large download
//! and upload together pass a token bucket of `max_bitrate`. Time is passed in.

use std::time::{Duration, Instant};

/// The operator's limits on the RPM service.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections served at once (load and probes alike).
    pub max_connections: usize,
    /// How long one connection may live.
    pub max_duration: Duration,
    /// Bits a second of all transfers together (both directions); `None`: no cap.
    pub max_bitrate: Option<f64>,
    /// Bytes the service may hold in HTTP/2 windows and send buffers, all connections
    /// together: each connection's windows are sized from it.
    pub max_memory_bytes: u64,
}

/// Connections being refused (their 503 written) at once, at most; beyond, closed unread.
pub const MAX_REFUSING: usize = 16;
/// The least memory a connection may be given; a budget that leaves less is refused.
pub const MIN_CONNECTION_BYTES: u64 = 256 << 10;
/// The most window a connection gets, however large the budget (more adds queue, not rate,
/// at the rates this serves).
pub const MAX_WINDOW_BYTES: u32 = 8 << 20;
/// What a stream may hold in h2's send buffer, and TLS in its own (a probe's answer waits
/// behind at most this much of a large download on its connection, beside the socket's
/// 5 ms).
pub const SEND_BUF_BYTES: usize = 16 << 10;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 64,
            max_duration: Duration::from_secs(120),
            max_bitrate: None,
            max_memory_bytes: 512 << 20,
        }
    }
}

impl Limits {
    /// The HTTP/2 receive window each connection gets (connection and stream alike):
    /// half its share of the memory (the other half for send buffers and TLS).
    pub fn window_bytes(&self) -> Result<u32, String> {
        let per = self.max_memory_bytes / self.max_connections.max(1) as u64;
        if per < MIN_CONNECTION_BYTES {
            return Err(format!(
                "{} bytes for {} connections leaves {per} a connection, under {MIN_CONNECTION_BYTES}",
                self.max_memory_bytes, self.max_connections
            ));
        }
        Ok((per / 2).min(MAX_WINDOW_BYTES as u64) as u32)
    }
}

/// What to do with a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Serve,
    /// Answer every request with 503 naming the connection limit, then close.
    Refuse,
    /// Close at once, unread (outside the allowlist, or too many being refused).
    Drop,
}

/// The live counts the decision reads.
#[derive(Debug, Default)]
pub struct Counts {
    pub serving: usize,
    pub refusing: usize,
}

impl Counts {
    pub fn admit(&mut self, allowed: bool, limits: &Limits) -> Admit {
        if !allowed {
            Admit::Drop
        } else if self.serving < limits.max_connections {
            self.serving += 1;
            Admit::Serve
        } else if self.refusing < MAX_REFUSING {
            self.refusing += 1;
            Admit::Refuse
        } else {
            Admit::Drop
        }
    }

    pub fn done(&mut self, how: Admit) {
        match how {
            Admit::Serve => self.serving -= 1,
            Admit::Refuse => self.refusing -= 1,
            Admit::Drop => {}
        }
    }
}

/// Requests one connection may make in a second, on average (a second's worth at once):
/// the draft's client sends at most 100 probes a second over all its connections, and a
/// stream opened and reset on a loop (CVE-2023-44487) costs the server one request each.
pub const MAX_REQUESTS_PER_S: u64 = 250;

/// One connection's request budget, [`MAX_REQUESTS_PER_S`] a second.
#[derive(Debug)]
pub struct RequestBudget {
    tokens: f64,
    at: Instant,
}

impl RequestBudget {
    pub fn new(now: Instant) -> RequestBudget {
        RequestBudget {
            tokens: MAX_REQUESTS_PER_S as f64,
            at: now,
        }
    }

    /// Spends `n` new requests: false once the connection went over its budget.
    pub fn spend(&mut self, n: u64, now: Instant) -> bool {
        let rate = MAX_REQUESTS_PER_S as f64;
        let earned = now.duration_since(self.at).as_secs_f64() * rate;
        self.tokens = (self.tokens + earned).min(rate) - n as f64;
        self.at = now;
        self.tokens >= 0.0
    }
}

/// A token bucket in bytes: `rate` bytes a second, a tenth of a second's worth in a burst.
#[derive(Debug)]
pub struct Bucket {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    pub fn new(bits_per_s: f64, now: Instant) -> Bucket {
        let rate = bits_per_s / 8.0;
        Bucket {
            rate,
            tokens: rate / 10.0,
            at: now,
        }
    }

    /// Takes `bytes`: `None` when they may go now, else how long to wait first (the debt
    /// is taken anyway, so waiters queue fairly behind it).
    pub fn take(&mut self, bytes: usize, now: Instant) -> Option<Duration> {
        let cap = self.rate / 10.0;
        self.tokens =
            (self.tokens + now.duration_since(self.at).as_secs_f64() * self.rate).min(cap);
        self.at = now;
        self.tokens -= bytes as f64;
        (self.tokens < 0.0).then(|| Duration::from_secs_f64(-self.tokens / self.rate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_after_the_limit_is_refused_then_dropped() {
        let limits = Limits {
            max_connections: 2,
            ..Limits::default()
        };
        let mut c = Counts::default();
        let got: Vec<Admit> = (0..2 + MAX_REFUSING + 1)
            .map(|_| c.admit(true, &limits))
            .collect();
        assert_eq!(&got[..2], &[Admit::Serve, Admit::Serve]);
        assert!(got[2..2 + MAX_REFUSING].iter().all(|a| *a == Admit::Refuse));
        assert_eq!(got.last(), Some(&Admit::Drop));
        c.done(Admit::Serve);
        assert_eq!(c.admit(true, &limits), Admit::Serve);
        assert_eq!(c.admit(false, &limits), Admit::Drop);
    }

    #[test]
    fn the_bucket_passes_its_rate_and_no_more() {
        let t0 = Instant::now();
        let mut b = Bucket::new(8e6, t0); // 1 MB/s, 100 kB burst
        assert_eq!(b.take(100_000, t0), None);
        let wait = b.take(500_000, t0).unwrap();
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-6, "{wait:?}");
        // A second later the debt is paid and 0.5 MB more came in, capped at the burst.
        assert_eq!(b.take(100_000, t0 + Duration::from_secs(2)), None);
    }

    #[test]
    fn a_connection_may_spend_its_rate_but_not_twice_it() {
        let t0 = Instant::now();
        let mut b = RequestBudget::new(t0);
        let tick = Duration::from_millis(200);
        // At the rate for ten seconds: never over.
        let per_tick = MAX_REQUESTS_PER_S / 5;
        assert!((1..=50).all(|i| b.spend(per_tick, t0 + tick * i)));
        // At twice the rate: over within the second's burst.
        let t1 = t0 + tick * 50;
        let over = (1..=10).find(|i| !b.spend(2 * per_tick, t1 + tick * *i));
        assert_eq!(over, Some(5));
    }

    #[test]
    fn memory_sizes_windows_and_refuses_too_little() {
        let l = Limits {
            max_connections: 50,
            max_memory_bytes: 100 << 20,
            ..Limits::default()
        };
        assert_eq!(l.window_bytes(), Ok((100 << 20) / 50 / 2));
        let l = Limits {
            max_memory_bytes: 1 << 20,
            ..l
        };
        assert!(l.window_bytes().unwrap_err().contains("under"));
    }
}
