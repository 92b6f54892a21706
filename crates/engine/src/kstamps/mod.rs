//! Where a round trip's time goes: the kernel's own timestamps of each message
//! (`SO_TIMESTAMPING`) on both ends, split into stages that each take their two readings
//! on one host's clock, so no clock sync is needed. The echo tells the client its part in
//! each answer's first bytes ([`EchoFigures`]), as a STAMP reflector carries its stamps.

pub mod batch;
pub mod book;
pub mod datagram;
pub mod echo;
pub mod io;
pub mod kinds;
pub mod rx_read;
pub mod sample;
pub mod stages;

pub use book::{Book, Heads};
pub use echo::{peer_key, EchoStamps};
pub use io::{
    enable, now_real, recv_stamped, rx_stamp_of, ErrQueue, Queued, TxPoint, TxStamp,
    RX_CONTROL_BYTES,
};
pub use kinds::StampKinds;
pub use rx_read::{stream_read, RxRead};
pub use sample::{send_stamped, Sampling, TxControl};
pub use stages::{EchoFigures, Readings, StageHists, Unsplit, FIGURE_BYTES, STAGES};
