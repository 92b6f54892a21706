//! What the live tests hold together: worker threads and memory (the spec's estimate),
//! and the bits per second of the client parts, booked when a test is admitted and
//! released when it ends, whatever path it took.

use std::sync::{Arc, Mutex};

use super::amounts::{bytes, si};

/// What one test asks of the account, or what the agent allows all of them together.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Share {
    pub threads: usize,
    pub bytes: u64,
    /// Bits per second a client part may send (`Limits::client_bits`); 0 for a serving
    /// part. As a maximum, `--max-client-bitrate` (infinite without a cap).
    pub client_bits: f64,
}

impl Share {
    /// What `d` asks, with the bits a client part sends (0 for a serving part).
    pub(super) fn asked(d: &crate::kind::Demand, client_bits: f64) -> Share {
        Share {
            threads: d.threads,
            bytes: d.memory_bytes,
            client_bits,
        }
    }

    /// What the agent allows the live tests together: `--max-threads`, `--max-memory`,
    /// a client part's bits at most `client_bits`.
    pub(super) fn allowed(max_threads: usize, max_bytes: u64, client_bits: f64) -> Share {
        Share {
            threads: max_threads,
            bytes: max_bytes,
            client_bits,
        }
    }
}

/// A test that does not fit beside the live tests, naming the `sonde serve` flag that
/// refuses it and what the live tests hold.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OverShare {
    #[error("{asked} worker threads beside {live} of running tests, over this agent's --max-threads of {max} (fewer --threads/--server-threads/--rx-threads, or start the agent with a higher --max-threads)")]
    Threads {
        asked: usize,
        live: usize,
        max: usize,
    },
    #[error("the test needs about {} of memory beside {} of running tests (buffers, stacks, UMEM), over this agent's --max-memory of {} (start the agent with a higher --max-memory)", bytes(*.asked), bytes(*.live), bytes(*.max))]
    Memory { asked: u64, live: u64, max: u64 },
    /// `--max-client-bitrate` holds for all running client parts together.
    #[error("a client part of {} bit/s beside {} bit/s of this agent's running client parts, over its --max-client-bitrate of {} bit/s for all of them together (wait for one to end, lower --rate, or start the agent with a higher --max-client-bitrate)", si(*.asked), si(*.live), si(*.max))]
    ClientBits { asked: f64, live: f64, max: f64 },
}

impl OverShare {
    /// The first of `ask`'s threads, bytes and client bits that does not fit beside
    /// `live` under `max`.
    pub(super) fn first(asked: Share, live: Share, max: Share) -> Option<OverShare> {
        if asked.threads.saturating_add(live.threads) > max.threads {
            return Some(OverShare::Threads {
                asked: asked.threads,
                live: live.threads,
                max: max.threads,
            });
        }
        if asked.bytes.saturating_add(live.bytes) > max.bytes {
            return Some(OverShare::Memory {
                asked: asked.bytes,
                live: live.bytes,
                max: max.bytes,
            });
        }
        let over =
            asked.client_bits > 0.0 && asked.client_bits + live.client_bits > max.client_bits;
        over.then_some(OverShare::ClientBits {
            asked: asked.client_bits,
            live: live.client_bits,
            max: max.client_bits,
        })
    }
}

/// Threads, bytes and client bits booked by the live tests: the agent's, and those a
/// service beside it serves (`serve --iperf3`), which share its `ServeConfig::account`.
#[derive(Debug, Default)]
pub struct Account {
    booked: Mutex<Share>,
}

/// A test's threads and memory booked by a service beside the agent; released when
/// dropped.
#[derive(Debug)]
pub struct HeldShare {
    account: Arc<Account>,
    share: Share,
}

impl Drop for HeldShare {
    fn drop(&mut self) {
        self.account.release(self.share);
    }
}

/// One test's share of the account; released when dropped.
#[derive(Debug)]
pub(super) struct Booking<'a> {
    account: &'a Account,
    share: Share,
}

impl Account {
    /// Books `ask` if it fits beside the live tests' under `max`, else says which flag
    /// refuses it and what the live tests hold.
    pub(super) fn book(&self, ask: Share, max: Share) -> Result<Booking<'_>, OverShare> {
        self.take(ask, max)?;
        Ok(Booking {
            account: self,
            share: ask,
        })
    }

    /// Adds `ask` to what is booked if it fits under `max`.
    fn take(&self, ask: Share, max: Share) -> Result<(), OverShare> {
        let mut booked = self.booked.lock().unwrap_or_else(|e| e.into_inner());
        let live = *booked;
        if let Some(why) = OverShare::first(ask, live, max) {
            return Err(why);
        }
        *booked = Share {
            threads: live.threads + ask.threads,
            bytes: live.bytes + ask.bytes,
            client_bits: live.client_bits + ask.client_bits,
        };
        Ok(())
    }

    /// Books the serving side of a test `d` asks for beside the live tests, under the
    /// agent's `--max-threads` and `--max-memory` (`max_threads`, `max_bytes`), or says
    /// which flag refuses it and what they hold.
    pub fn book_serving(
        self: &Arc<Self>,
        d: &crate::kind::Demand,
        max_threads: usize,
        max_bytes: u64,
    ) -> Result<HeldShare, OverShare> {
        let ask = Share::asked(d, 0.0);
        self.take(ask, Share::allowed(max_threads, max_bytes, f64::INFINITY))?;
        Ok(HeldShare {
            account: Arc::clone(self),
            share: ask,
        })
    }

    /// Gives back what `share` booked.
    fn release(&self, share: Share) {
        let mut booked = self.booked.lock().unwrap_or_else(|e| e.into_inner());
        booked.threads = booked.threads.saturating_sub(share.threads);
        booked.bytes = booked.bytes.saturating_sub(share.bytes);
        booked.client_bits = (booked.client_bits - share.client_bits).max(0.0);
    }

    /// What is booked now.
    #[cfg(test)]
    pub(super) fn booked(&self) -> Share {
        *self.booked.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Booking<'_> {
    fn drop(&mut self) {
        self.account.release(self.share);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(threads: usize, bytes: u64, client_bits: f64) -> Share {
        Share {
            threads,
            bytes,
            client_bits,
        }
    }

    /// A service's share (the iperf3 server's) is booked beside the agent's tests under
    /// the same limits, and given back when dropped.
    #[test]
    fn a_services_share_counts_beside_the_agents_tests() {
        let a = Arc::new(Account::default());
        let max_bytes = 1 << 30;
        let own = a
            .book(share(3, 1 << 20, 0.0), share(4, u64::MAX, 1.0))
            .unwrap();
        let demand = |threads| crate::kind::Demand {
            connections: 1,
            rate: None,
            bits_per_s: None,
            message_bytes: 1,
            threads,
            memory_bytes: 1 << 20,
        };
        let e = a
            .book_serving(&demand(2), 4, max_bytes)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("2 worker threads beside 3 of running tests"),
            "{e}"
        );
        let held = a.book_serving(&demand(1), 4, max_bytes).unwrap();
        assert_eq!(a.booked(), share(4, 2 << 20, 0.0));
        drop((own, held));
        assert_eq!(a.booked(), Share::default());
    }

    #[test]
    fn bookings_add_up_and_are_released() {
        let a = Account::default();
        let max = share(256, 4 << 20, f64::INFINITY);
        let one = a.book(share(100, 1 << 20, 0.0), max).unwrap();
        let two = a.book(share(100, 1 << 20, 0.0), max).unwrap();
        let e = a.book(share(100, 0, 0.0), max).unwrap_err().to_string();
        assert!(e.contains("--max-threads"), "{e}");
        let e = a.book(share(1, 3 << 20, 0.0), max).unwrap_err().to_string();
        assert!(e.contains("--max-memory"), "{e}");
        drop(one);
        assert_eq!(a.booked(), share(100, 1 << 20, 0.0));
        drop(two);
        assert_eq!(a.booked(), Share::default());
        assert!(a
            .book(share(usize::MAX, u64::MAX, 0.0), share(256, 1, 1.0))
            .is_err());
    }

    /// Four client parts of 400 Mbit/s against a 1 Gbit/s cap: two run, the third is
    /// refused naming the flag and what the two hold, and is admitted once one ends.
    #[test]
    fn client_parts_together_stay_under_the_client_bitrate() {
        let a = Account::default();
        let max = share(256, 1 << 30, 1e9);
        let part = share(1, 1, 4e8);
        let one = a.book(part, max).unwrap();
        let _two = a.book(part, max).unwrap();
        let e = a.book(part, max).unwrap_err().to_string();
        assert!(
            e.contains("--max-client-bitrate") && e.contains("800.000M"),
            "{e}"
        );
        // A serving part books no client bits.
        let _serving = a.book(share(1, 1, 0.0), max).unwrap();
        drop(one);
        let _three = a.book(part, max).unwrap();
        assert_eq!(a.booked().client_bits, 8e8);
    }
}
