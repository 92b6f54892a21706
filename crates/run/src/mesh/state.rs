//! What the mesh's thread and its readers share: the state the metrics read (a leaf: the
//! prober and the module's root both import it).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

use sonde_results::mesh::PeerStats;

use super::peers::Peer;

/// One listed peer and its figures.
#[derive(Debug)]
pub struct PeerEntry {
    pub peer: Peer,
    /// The labels its reflector answered (the list's win over them).
    pub learned: BTreeMap<String, String>,
    pub stats: PeerStats,
    pub(super) next_seq: u32,
    /// Its reflector said (under a verified HMAC TLV) it runs on this host: one clock.
    pub(super) one_clock: bool,
}

impl PeerEntry {
    /// Its labels: what its reflector said, under what the list says.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut out = self.learned.clone();
        out.extend(self.peer.labels.clone());
        out
    }
}

/// What the metrics read: the agent's own figures and each listed peer's.
#[derive(Debug)]
pub struct MeshState {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub budget_per_s: f64,
    /// Probes per second scheduled now, all peers together.
    pub rate_per_s: f64,
    pub reflected: u64,
    pub refused: u64,
    pub peers: Peers,
    /// Why the last reading of the list failed (the previous list is kept).
    pub list_error: Option<String>,
}

/// The listed peers: each in a slot (a small number, reused) that the prober's schedules
/// name, so that a probe due finds its peer without a search; by address for answers and
/// list changes; in address order for the metrics.
#[derive(Debug, Default)]
pub struct Peers {
    index: HashMap<SocketAddr, usize>,
    slots: Vec<Option<PeerEntry>>,
    free: Vec<usize>,
}

impl Peers {
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Each peer's address (its reflector) and entry, in address order.
    pub fn iter(&self) -> impl Iterator<Item = (&SocketAddr, &PeerEntry)> {
        let mut all: Vec<(&SocketAddr, &PeerEntry)> = self
            .index
            .iter()
            .filter_map(|(a, s)| Some((a, self.slots[*s].as_ref()?)))
            .collect();
        all.sort_unstable_by_key(|(a, _)| **a);
        all.into_iter()
    }

    /// Each peer's entry, in address order (as [`Peers::iter`]).
    pub fn values(&self) -> impl Iterator<Item = &PeerEntry> {
        self.iter().map(|(_, e)| e)
    }

    pub fn get(&self, addr: &SocketAddr) -> Option<&PeerEntry> {
        self.slots[*self.index.get(addr)?].as_ref()
    }

    pub fn contains(&self, addr: &SocketAddr) -> bool {
        self.index.contains_key(addr)
    }

    /// The slot of the peer at `addr`.
    pub(super) fn slot_of(&self, addr: &SocketAddr) -> Option<usize> {
        self.index.get(addr).copied()
    }

    pub(super) fn slot_mut(&mut self, slot: usize) -> Option<&mut PeerEntry> {
        self.slots.get_mut(slot)?.as_mut()
    }

    /// A new peer (its address not listed yet) in a free slot; the slot.
    pub(super) fn insert(&mut self, addr: SocketAddr, entry: PeerEntry) -> usize {
        let slot = self.free.pop().unwrap_or(self.slots.len());
        if slot == self.slots.len() {
            self.slots.push(None);
        }
        self.slots[slot] = Some(entry);
        self.index.insert(addr, slot);
        slot
    }

    /// The peer at `addr` gone; the slot it left.
    pub(super) fn remove(&mut self, addr: &SocketAddr) -> Option<usize> {
        let slot = self.index.remove(addr)?;
        self.slots[slot] = None;
        self.free.push(slot);
        Some(slot)
    }

    /// The addresses listed (any order).
    pub(super) fn addrs(&self) -> Vec<SocketAddr> {
        self.index.keys().copied().collect()
    }
}
