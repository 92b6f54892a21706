//! What the connections an agent serves share: its configuration, the test slots, the
//! connections in their handshake, the live tests' threads and memory.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sonde_proto::Key;

use super::account;
use super::limits::Limits;
use super::refusals::Refusals;
use super::sources;
use crate::allow::Allowed;
use crate::signals::Interrupt;

/// How long a new controller waits for a running test to finish before "busy".
const BUSY_GRACE: Duration = Duration::from_millis(500);

pub struct ServeConfig {
    pub bind: IpAddr,
    pub port: u16,
    pub command: String,
    pub key: Option<Key>,
    /// Listen on a routable address without a key all the same.
    pub insecure_no_key: bool,
    pub limits: Limits,
    /// Tests served at once; beyond it a controller is told "busy".
    pub max_tests: usize,
    /// Engines and parts its operator opted into (`--allow`); none by default.
    pub allow: Allowed,
    /// testpmd's arguments and device on this host (`--dpdk-args`, `--dpdk-dev`).
    pub dpdk: crate::kind::dpdk_source::AgentDpdk,
    /// This agent's own labels (`--label`, checked by the caller), announced to accepted
    /// controllers.
    pub labels: sonde_proto::Labels,
    /// Addresses controllers reach this agent at besides the connection's own
    /// (`--reached-at`: a NAT's, a relay's).
    pub reached_at: Vec<IpAddr>,
    /// Networks this agent sends STAMP to when a controller asks (`--stamp-targets`): an
    /// agent-less reflector, a router's; none by default.
    pub stamp_targets: Vec<crate::stamp::Cidr>,
    /// This agent's operator's key for those reflectors (`--stamp-sender-key-file`): the
    /// only key an authenticated STAMP run from this agent uses.
    pub stamp_sender_key: Option<sonde_proto::stamp::StampKey>,
    /// What the live tests hold, shared with the services beside the agent (`serve
    /// --iperf3`), so that `--max-threads` and `--max-memory` hold for all of them.
    pub account: std::sync::Arc<account::Account>,
    /// `--stamps` on this agent's end: `--allow hwstamps`, the restore records' directory
    /// (`--state-dir`).
    pub stamping: crate::hwstamps::Stamping,
}

/// State shared by the connections being served: the tests running, the connections in
/// their handshake, the refusals to log.
pub(super) struct Shared {
    pub(super) cfg: ServeConfig,
    pub(super) running: AtomicUsize,
    /// Connections in their handshake, by source address.
    pub(super) sources: sources::Sources,
    pub(super) refusals: Refusals,
    /// Threads and memory of the live tests.
    pub(super) account: std::sync::Arc<account::Account>,
    pub(super) interrupt: Interrupt,
}

/// Holds one of the test slots, and the test's threads and memory once booked; frees them
/// when dropped, whatever path the test took.
pub(super) struct Slot<'a> {
    pub(super) running: &'a AtomicUsize,
    pub(super) booking: Option<account::Booking<'a>>,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.booking.take();
        self.running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Shared {
    /// Takes a test slot, waiting a moment for a test that is tidying up, so that
    /// back-to-back tests (lab, --poll all) are not told "busy".
    pub(super) fn take_slot(&self) -> Option<Slot<'_>> {
        let until = Instant::now() + BUSY_GRACE;
        let max = self.cfg.max_tests.max(1);
        loop {
            let taken = self
                .running
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < max).then_some(n + 1)
                });
            if taken.is_ok() {
                return Some(Slot {
                    running: &self.running,
                    booking: None,
                });
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Books `demand`'s threads and memory, and a client part's `client_bits`, beside the
    /// live tests' on `slot`, or says which flag refuses them.
    pub(super) fn book<'a>(
        &'a self,
        slot: &mut Slot<'a>,
        demand: &crate::kind::Demand,
        client_bits: f64,
    ) -> Result<(), account::OverShare> {
        let limits = &self.cfg.limits;
        let ask = account::Share::asked(demand, client_bits);
        let cap = limits.max_client_bitrate.unwrap_or(f64::INFINITY);
        let booking = self.account.book(ask, limits.allowed(cap))?;
        slot.booking = Some(booking);
        Ok(())
    }
}
