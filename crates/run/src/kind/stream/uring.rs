//! The stream kind's io_uring engine: the kernel's sockets (TCP_INFO as for the kernel
//! engine), a worker's connections in one ring, and `--zerocopy` sends (`send_zc`).

use std::io;

use sonde_engine::uring::stream::{receive_bytes_per_connection, UringStreamWorkers};
use sonde_engine::{Placement, StreamConn};
use sonde_results::{Engine, SpecError, StreamSpec};

use super::engine::{socket_stream_engine, StreamBackend, StreamEngine};
use crate::kind::table::Named;
use crate::kind::workers::Workers;

pub struct Uring;

impl Named for Uring {
    fn engine(&self) -> Engine {
        Engine::Uring
    }
    fn unavailable(&self) -> Option<String> {
        sonde_engine::uring::available()
            .err()
            .map(|e| e.to_string())
    }
}

/// Smallest buffer `--zerocopy` sends. A zero-copy send pins the pages, sets up a
/// completion notification and takes it back, work the copy it saves pays for only
/// above about 10 KB (the kernel's MSG_ZEROCOPY notes); 16 KiB is four pages.
pub const MIN_ZEROCOPY_BYTES: u32 = 16 << 10;

impl StreamBackend for Uring {
    /// `--zerocopy` is worth it only for large sends.
    fn refuse(&self, spec: &StreamSpec) -> Result<(), SpecError> {
        if spec.zerocopy && spec.buffer_bytes < MIN_ZEROCOPY_BYTES {
            return Err(SpecError {
                flag: "--zerocopy",
                reason: format!(
                    "a {} byte --buffer is below {MIN_ZEROCOPY_BYTES}, where zero-copy \
                     costs more than the copy it saves",
                    spec.buffer_bytes
                ),
            });
        }
        Ok(())
    }

    /// Zero-copy sends (`send_zc`) are an io_uring operation.
    fn owns(&self, spec: &StreamSpec) -> Option<&'static str> {
        spec.zerocopy.then_some("--zerocopy")
    }

    fn bytes_per_connection(&self, buffer_bytes: u32) -> u64 {
        let receive = receive_bytes_per_connection(buffer_bytes as usize) as u64;
        u64::from(buffer_bytes).saturating_add(receive)
    }

    fn start(
        &self,
        conns: Vec<StreamConn>,
        placement: Placement,
        spec: &StreamSpec,
    ) -> io::Result<Box<dyn StreamEngine>> {
        let bytes = spec.buffer_bytes as usize;
        let w = UringStreamWorkers::spawn(conns, placement, bytes, spec.zerocopy)?;
        Ok(Box::new(w))
    }
}

impl Workers for UringStreamWorkers {
    fn engine(&self) -> sonde_results::Engine {
        Engine::Uring
    }
    fn all_done(&self) -> bool {
        UringStreamWorkers::all_done(self)
    }
    fn abort(&self) {
        UringStreamWorkers::abort(self)
    }
}

socket_stream_engine!(
    UringStreamWorkers,
    fn notes(&self) -> Vec<String> {
        let Some((released, copied)) = self.zerocopy_usage() else {
            return Vec::new();
        };
        if !(0..self.conns().len()).any(|i| self.conns().is_sender(i)) {
            return vec![
                "send_zc: this side only received (the kernel copies into a \
                         receiver's buffers as always)"
                    .into(),
            ];
        }
        vec![zerocopy_note(released, copied)]
    }
);

/// How the zero-copy sends went: how many the kernel copied after all (a receiver on this
/// host, or a device without scatter-gather) says whether anything was saved.
fn zerocopy_note(released: u64, copied: u64) -> String {
    format!(
        "send_zc: zero-copy sends (io_uring SEND_ZC); the kernel copied \
         {copied} of {released} after all (a receiver on this host, a veth or loopback \
         path, or a device without scatter-gather copies)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_says_how_many_sends_were_copied() {
        let n = zerocopy_note(10, 4);
        assert!(n.starts_with("send_zc:") && n.contains("4 of 10"), "{n}");
    }
}
