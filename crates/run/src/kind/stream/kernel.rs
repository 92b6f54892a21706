//! The stream kind's kernel-socket engine: blocking send/recv on one connection, epoll
//! across several.

use std::io;
use std::net::TcpStream;

use sonde_engine::{Placement, StreamConn, StreamWorkers};
use sonde_results::{Engine, StreamSpec};

use super::engine::{socket_stream_engine, StreamBackend, StreamEngine};
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

socket_stream_engine!(StreamWorkers);
