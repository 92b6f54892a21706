//! The packet-rate kind's kernel-socket engine: sendmmsg senders (or one GSO send per
//! batch) on the controller's flows, a recvmmsg receiver on each socket of the agent's
//! SO_REUSEPORT group.

use std::io;
use std::net::{IpAddr, UdpSocket};

use sonde_engine::marks::filter::TosFilter;
use sonde_engine::pps::{attach_tos_filter, Blocked, FlowRx, PpsReceiver, PpsSender, TxPlan, Wire};
use sonde_engine::Placement;
use sonde_results::{Engine, PpsSpec};

use super::engine::{rx_plan, sending, PpsBackend, RxEngine, TxEngine};
use crate::kind::table::Named;
use crate::kind::workers::{staged_workers, Lifecycle};

pub struct Kernel;

impl Named for Kernel {
    fn engine(&self) -> Engine {
        Engine::Kernel
    }
}

impl PpsBackend for Kernel {
    fn open_tx(
        &self,
        spec: &PpsSpec,
        flows: Vec<UdpSocket>,
        _placement: &Placement,
    ) -> io::Result<Box<dyn TxEngine>> {
        Ok(Box::new(Flows::new(spec, Wire::Sonde, flows)))
    }

    fn open_rx(
        &self,
        spec: &PpsSpec,
        (sockets, notes): (Vec<UdpSocket>, Vec<String>),
        _ip: IpAddr,
        _peer: IpAddr,
    ) -> io::Result<Box<dyn RxEngine>> {
        Ok(Box::new(Group {
            spec: spec.clone(),
            stage: Lifecycle::Opened(sockets),
            notes,
            filter: None,
        }))
    }
}

/// The controller's flows, a socket each, then the senders on them, sending datagrams
/// in `wire`'s form (iperf3's too, on its UDP streams).
pub struct Flows {
    spec: PpsSpec,
    wire: Wire,
    stage: Lifecycle<Vec<UdpSocket>, PpsSender>,
}

impl Flows {
    pub fn new(spec: &PpsSpec, wire: Wire, flows: Vec<UdpSocket>) -> Flows {
        Flows {
            spec: spec.clone(),
            wire,
            stage: Lifecycle::Opened(flows),
        }
    }
}

impl TxEngine for Flows {
    fn start(&mut self, placement: Placement, cookie: u32) -> io::Result<()> {
        let spec = &self.spec;
        let plan = TxPlan {
            placement,
            sending: sending(spec, cookie),
            gso: spec.gso,
        };
        let wire = self.wire;
        self.stage
            .start(|flows| PpsSender::spawn_wire(flows, plan, wire))
    }
    fn counts(&self) -> (u64, u64) {
        self.stage.running().map_or((0, 0), PpsSender::counts)
    }
    fn blocked(&self) -> Option<Blocked> {
        Some(
            self.stage
                .running()
                .map_or_else(Blocked::default, PpsSender::blocked),
        )
    }
    fn join(&mut self) -> (Vec<u64>, Option<String>) {
        let w = self.stage.running_mut();
        w.map(PpsSender::join).unwrap_or_default()
    }
}

/// The agent's SO_REUSEPORT group, then a receiver on each socket.
struct Group {
    spec: PpsSpec,
    stage: Lifecycle<Vec<UdpSocket>, PpsReceiver>,
    notes: Vec<String>,
    /// The marks' filter, attached before `Ready` (or why the kernel refused it).
    filter: Option<Result<TosFilter, String>>,
}

impl RxEngine for Group {
    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }
    fn before_ready(&mut self, cookie: u32) {
        let plan = rx_plan(&self.spec, cookie);
        if let (true, Some(sockets)) = (plan.read_tos, self.stage.opened()) {
            self.filter = Some(attach_tos_filter(sockets, cookie, plan.flows));
        }
    }
    fn start(&mut self, cookie: u32) -> io::Result<()> {
        let plan = rx_plan(&self.spec, cookie);
        let filter = self.filter.take();
        self.stage
            .start(|sockets| PpsReceiver::spawn_counting(sockets, plan, Wire::Sonde, filter))
    }
    fn counts(&self) -> (u64, u64) {
        self.stage.running().map_or((0, 0), PpsReceiver::counts)
    }
    fn foreign(&self) -> u64 {
        self.stage.running().map_or(0, PpsReceiver::foreign)
    }
    fn arrived_tos(&self) -> Option<(Vec<(u8, u64)>, u64)> {
        self.stage.running().and_then(PpsReceiver::arrived_tos)
    }
    fn marks_note(&self) -> Option<String> {
        self.stage.running().and_then(PpsReceiver::tos_note)
    }
    fn join(&mut self) -> (Vec<FlowRx>, Option<String>) {
        let w = self.stage.running_mut();
        w.map(PpsReceiver::join).unwrap_or_default()
    }
}

staged_workers!(engine = |_| Engine::Kernel; Flows => PpsSender, Group => PpsReceiver);
