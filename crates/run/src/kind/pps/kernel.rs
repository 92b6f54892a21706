//! The packet-rate kind's kernel-socket engine: sendmmsg senders (or one GSO send per
//! batch) on the controller's flows, a recvmmsg receiver on each socket of the agent's
//! SO_REUSEPORT group.

use std::io;
use std::net::{IpAddr, UdpSocket};

use sonde_engine::pps::{FlowRx, PpsReceiver, PpsSender, TxPlan};
use sonde_engine::Placement;
use sonde_results::{Engine, PpsSpec};

use super::engine::{rx_plan, senders_stop_at, PpsBackend, RxEngine, RxPort, TxEngine, TxPort};
use crate::kind::table::Named;
use crate::kind::workers::kernel_workers;

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
    ) -> io::Result<Box<dyn TxPort>> {
        Ok(Box::new(Flows {
            spec: spec.clone(),
            flows,
        }))
    }

    fn open_rx(
        &self,
        spec: &PpsSpec,
        (sockets, notes): (Vec<UdpSocket>, Vec<String>),
        _ip: IpAddr,
        _peer: IpAddr,
    ) -> io::Result<Box<dyn RxPort>> {
        Ok(Box::new(Group {
            spec: spec.clone(),
            sockets,
            notes,
        }))
    }
}

/// The controller's flows, a socket each.
struct Flows {
    spec: PpsSpec,
    flows: Vec<UdpSocket>,
}

impl TxPort for Flows {
    fn start(self: Box<Self>, placement: Placement, cookie: u32) -> io::Result<Box<dyn TxEngine>> {
        let spec = &self.spec;
        let plan = TxPlan {
            placement,
            payload_bytes: spec.payload_bytes() as usize,
            batch: spec.batch as usize,
            rate_pps: spec.rate_pps,
            stop_at: senders_stop_at(spec),
            cookie,
            gso: spec.gso,
        };
        Ok(Box::new(PpsSender::spawn(self.flows, plan)?))
    }
}

/// The agent's SO_REUSEPORT group: a receiver on each socket.
struct Group {
    spec: PpsSpec,
    sockets: Vec<UdpSocket>,
    notes: Vec<String>,
}

impl RxPort for Group {
    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }
    fn start(self: Box<Self>, cookie: u32) -> io::Result<Box<dyn RxEngine>> {
        let plan = rx_plan(&self.spec, cookie);
        Ok(Box::new(PpsReceiver::spawn(self.sockets, plan)?))
    }
}

kernel_workers!(PpsSender, PpsReceiver);

impl TxEngine for PpsSender {
    fn counts(&self) -> (u64, u64) {
        PpsSender::counts(self)
    }
    fn join(&mut self) -> (Vec<u64>, Option<String>) {
        PpsSender::join(self)
    }
}

impl RxEngine for PpsReceiver {
    fn counts(&self) -> (u64, u64) {
        PpsReceiver::counts(self)
    }
    fn foreign(&self) -> u64 {
        PpsReceiver::foreign(self)
    }
    fn join(&mut self) -> (Vec<FlowRx>, Option<String>) {
        PpsReceiver::join(self)
    }
}
