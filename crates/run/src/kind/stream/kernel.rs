//! The stream kind's kernel-socket engine: blocking send/recv on one connection, epoll
//! across several.

use std::io;
use std::net::TcpStream;

use sonde_engine::sockopt::tcp_info;
use sonde_engine::stream::ConnEnd;
use sonde_engine::{Placement, StreamConn, StreamWorkers, TcpInfo};
use sonde_results::{Engine, StreamSpec};

use super::engine::{StreamBackend, StreamEngine};
use crate::kind::table::Named;
use crate::kind::workers::kernel_workers;

pub struct Kernel;

impl Named for Kernel {
    fn engine(&self) -> Engine {
        Engine::Kernel
    }
}

impl StreamBackend for Kernel {
    fn start(
        &self,
        conns: Vec<(TcpStream, bool)>,
        placement: Placement,
        spec: &StreamSpec,
    ) -> io::Result<Box<dyn StreamEngine>> {
        let conns = conns
            .into_iter()
            .map(|(stream, send)| StreamConn { stream, send })
            .collect();
        Ok(Box::new(StreamWorkers::spawn(
            conns,
            placement,
            spec.buffer_bytes as usize,
        )?))
    }
}

kernel_workers!(StreamWorkers);

impl StreamEngine for StreamWorkers {
    fn connections(&self) -> usize {
        self.conns().len()
    }
    fn counters(&self, i: usize) -> (u64, u64) {
        self.conns().counters(i)
    }
    fn is_sender(&self, i: usize) -> bool {
        self.conns().is_sender(i)
    }
    fn tcp_info(&self, i: usize) -> Option<TcpInfo> {
        tcp_info(self.conns().fd(i))
    }
    fn finish(&self) {
        StreamWorkers::finish(self)
    }
    fn join(&mut self) -> Vec<ConnEnd> {
        StreamWorkers::join(self)
    }
}
