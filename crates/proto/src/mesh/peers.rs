//! The prober's table of listed peers: each in a slot (a small number, reused) that its
//! schedules name, so that a probe due finds its peer without a search; by address for
//! answers and list changes; in address order for the metrics.

use foldhash::HashMap;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use sonde_results::mesh::PeerStats;

use crate::stamp::StampKey;

/// A peer to probe, as its list names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its STAMP reflector.
    pub addr: SocketAddr,
    /// Unauthenticated probes to an agent-less reflector (`open` in a file); its answers
    /// carry no per-session numbers, so its losses have no direction.
    pub open: bool,
    pub labels: BTreeMap<String, String>,
}

/// One listed peer and its figures.
#[derive(Debug)]
pub struct PeerEntry {
    pub peer: Peer,
    /// The labels its reflector answered (the list's win over them).
    pub learned: BTreeMap<String, String>,
    pub stats: PeerStats,
    /// The number its next probe carries.
    pub(crate) next_seq: u32,
    /// Its reflector said (under a verified HMAC TLV) it runs on this host: one clock.
    pub(crate) one_clock: bool,
    /// Its keys, with a mesh key.
    pub(crate) keys: Option<PeerKeys>,
    /// Its last first answer, its figures awaiting the next answer's follow-up.
    pub(crate) held: Option<super::held::Held>,
    /// The number and sender timestamp of the probe polled last, until it is sent.
    pub(crate) polled: Option<(u32, u64)>,
}

/// A keyed peer's keys: its probes' (this agent's address towards it and its own), and
/// its answers' (its address key), kept once one of its answers checked under it (boxed:
/// a silent peer's is 8 bytes, not an HMAC's state).
#[derive(Debug)]
pub(crate) struct PeerKeys {
    /// The address this agent's probes to it leave from (the probe key names it).
    pub from: IpAddr,
    pub probe: StampKey,
    pub answer: Option<Box<StampKey>>,
}

impl PeerEntry {
    /// Its labels: what its reflector said, under what the list says.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut out = self.learned.clone();
        out.extend(self.peer.labels.clone());
        out
    }

    /// Whether its reflector said it runs on this host (one clock, no offset).
    pub fn one_clock(&self) -> bool {
        self.one_clock
    }
}

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
    pub(crate) fn slot_of(&self, addr: &SocketAddr) -> Option<usize> {
        self.index.get(addr).copied()
    }

    pub(crate) fn slot_mut(&mut self, slot: usize) -> Option<&mut PeerEntry> {
        self.slots.get_mut(slot)?.as_mut()
    }

    /// The peer at `addr` and its slot.
    pub(crate) fn find_mut(&mut self, addr: &SocketAddr) -> Option<(usize, &mut PeerEntry)> {
        let slot = self.slot_of(addr)?;
        Some((slot, self.slot_mut(slot)?))
    }

    /// A new peer (its address not listed yet) in a free slot; the slot.
    pub(crate) fn insert(&mut self, addr: SocketAddr, entry: PeerEntry) -> usize {
        let slot = self.free.pop().unwrap_or(self.slots.len());
        if slot == self.slots.len() {
            self.slots.push(None);
        }
        self.slots[slot] = Some(entry);
        self.index.insert(addr, slot);
        slot
    }

    /// The peer at `addr` gone; the slot it left.
    pub(crate) fn remove(&mut self, addr: &SocketAddr) -> Option<usize> {
        let slot = self.index.remove(addr)?;
        self.slots[slot] = None;
        self.free.push(slot);
        Some(slot)
    }

    /// The addresses listed (any order).
    pub(crate) fn addrs(&self) -> Vec<SocketAddr> {
        self.index.keys().copied().collect()
    }
}
