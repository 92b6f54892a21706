//! The stream kind's kernel-socket engine: blocking send/recv on one connection, epoll
//! across several.

use std::io;

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
        conns: Vec<StreamConn>,
        placement: Placement,
        spec: &StreamSpec,
    ) -> io::Result<Box<dyn StreamEngine>> {
        Ok(Box::new(StreamWorkers::spawn(
            conns,
            placement,
            spec.buffer_bytes as usize,
        )?))
    }
}

kernel_workers!(StreamWorkers);

socket_stream_engine!(StreamWorkers);
