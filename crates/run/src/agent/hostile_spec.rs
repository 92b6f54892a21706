//! A hostile controller's spec from arbitrary bytes, into validation and the agent's limit
//! checks for either part: a refusal or an admission, never a panic or an overflow (built
//! with debug assertions, any wrapping arithmetic aborts). The body of the `spec_validate`
//! fuzz target (`feature = "fuzzing"`), and of a test that feeds it random bytes in every
//! test run: CI's fuzz build leaves this crate out, which cut it from 107 s to 35 s.
//!
//! The bytes are read as JSON when they parse, else as field values written over a default
//! spec of the kind the first byte picks, so that extreme numbers (durations near 2^64,
//! counts near 2^32, NaN rates) are reached at once.

use sonde_results::{
    PollMode, PpsSpec, Role, RrSpec, Stall, StreamSpec, TestSpec, Timing, Transport,
};

use super::Limits;

/// Reads fixed-size values off the front of the input, zeros once it runs out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        let n = N.min(self.0.len());
        b[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        b
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn f64(&mut self) -> f64 {
        f64::from_le_bytes(self.take())
    }
    fn opt_u32(&mut self) -> Option<u32> {
        let v = self.u32();
        (v & 1 == 1).then_some(v >> 1)
    }
    fn opt_f64(&mut self) -> Option<f64> {
        let tag = self.take::<1>()[0];
        let v = self.f64();
        (tag & 1 == 1).then_some(v)
    }
}

fn timing(b: &mut Bytes) -> Timing {
    Timing {
        duration_ms: b.u64(),
        warmup_ms: b.u64(),
        cooldown_ms: b.u64(),
        interval_ms: b.u64(),
    }
}

fn structured(data: &[u8]) -> TestSpec {
    let mut b = Bytes(data);
    let pick = b.take::<1>()[0];
    match pick % 4 {
        0 => TestSpec::Stream(StreamSpec {
            connections: b.u32(),
            client_threads: b.opt_u32(),
            server_threads: b.opt_u32(),
            timing: timing(&mut b),
            buffer_bytes: b.u32(),
            sndbuf_bytes: b.opt_u32(),
            rcvbuf_bytes: b.opt_u32(),
            rate_bits_per_s: b.opt_f64(),
            ..Default::default()
        }),
        1 | 2 => {
            let r = RrSpec {
                transport: if pick & 8 == 0 {
                    Transport::Tcp
                } else {
                    Transport::Udp
                },
                connections: b.u32(),
                window: b.u32(),
                request_bytes: b.u32(),
                response_bytes: b.u32(),
                client_threads: b.opt_u32(),
                server_threads: b.opt_u32(),
                timing: timing(&mut b),
                rate_per_s: b.opt_f64(),
                poll: PollMode::Hybrid { spin_us: b.u32() },
                server_stall: Some(Stall {
                    after_ms: b.u64(),
                    stall_ms: b.u64(),
                }),
                ..Default::default()
            };
            if pick % 4 == 1 {
                TestSpec::Ping(r)
            } else {
                TestSpec::Rpc(r)
            }
        }
        _ => TestSpec::Pps(PpsSpec {
            size_bytes: b.u32(),
            tx_threads: b.u32(),
            rx_threads: b.u32(),
            flows: b.u32(),
            batch: b.u32(),
            rate_pps: b.opt_f64(),
            timing: timing(&mut b),
            ..Default::default()
        }),
    }
}

/// Reads `data` as a spec and puts it through validation and both parts' limit checks.
pub fn admit_or_refuse(data: &[u8]) {
    let mut spec = serde_json::from_slice::<TestSpec>(data).unwrap_or_else(|_| structured(data));
    let _ = spec.validate();
    let _ = spec.timing().total_ms();
    let _ = spec.timing().intervals();
    let Some(kind) = crate::kind::of(&spec) else {
        return;
    };
    let limits = Limits {
        max_rate: Some(1e6),
        max_bitrate: Some(1e9),
        test_hooks: data.len().is_multiple_of(2),
        max_memory_bytes: 1 << 30,
        ..Limits::default()
    };
    for role in [Role::Server, Role::Client] {
        let _ = kind.demand(&spec, role);
        let _ = limits.check(&spec, kind, role);
    }
    limits.pace_client_part(&mut spec);
    let _ = limits.check(&spec, kind, Role::Client);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random bytes of every length up to 256, from a fixed seed: each a refusal or an
    /// admission (a panic fails the test), also read as JSON where a prefix makes them so.
    #[test]
    fn random_specs_are_refused_or_admitted_never_a_panic() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for n in 0..20_000usize {
            let bytes: Vec<u8> = (0..n % 257).map(|_| next() as u8).collect();
            admit_or_refuse(&bytes);
        }
        // Every kind's default as JSON with the extremes written in, each read as JSON.
        let kinds = [
            TestSpec::Stream(StreamSpec::default()),
            TestSpec::Ping(RrSpec::default()),
            TestSpec::Rpc(RrSpec::default()),
            TestSpec::Pps(PpsSpec::default()),
        ];
        for spec in kinds {
            let mut v = serde_json::to_value(&spec).unwrap();
            for (field, extreme) in [("duration_ms", u64::MAX), ("interval_ms", 0)] {
                // Timing is flattened into each kind's spec.
                v[field] = extreme.into();
                let bytes = serde_json::to_vec(&v).unwrap();
                let read: TestSpec = serde_json::from_slice(&bytes).expect("read as JSON");
                let timing = read.timing();
                let got = [
                    ("duration_ms", timing.duration_ms),
                    ("interval_ms", timing.interval_ms),
                ];
                assert!(got.contains(&(field, extreme)), "{v}");
                admit_or_refuse(&bytes);
            }
        }
    }
}
