//! `--stages` on io_uring. Receives return the kernel's receive stamp: a multishot
//! RECVMSG with room for the control message, which the kernel writes into each provided
//! buffer as io_uring lays it out (`io_uring_recvmsg_out`, the address, the control
//! messages, the data). The echo's TCP answers each carry their own figures: one vectored
//! send of a batch, each answer's figures then the constant rest of it. The stamps of
//! sends are read from each socket's error queue with `ErrQueue::drain` (a `recvmmsg` of
//! up to 16 stamps per call, while a stamp is awaited): the io-uring crate has no
//! operation that reads it.

use std::net::SocketAddr;
use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types};

use super::ring::GROUP;
use crate::kstamps::{
    peer_key, rx_stamp_of, EchoStamps, Sampling, TxControl, FIGURE_BYTES, RX_CONTROL_BYTES,
};
use crate::udp_match::{REQUEST_HEADER_BYTES, SEQ_BYTES};

/// `io_uring_recvmsg_out`: four u32 (the lengths of the address, the control messages
/// and the data, and the flags).
const RECVMSG_OUT_BYTES: usize = 16;

/// What a multishot RECVMSG keeps before each buffer's data: room for the sender's
/// address and, with stages, the receive stamp. Boxed: the ring reads it where it is.
pub(crate) struct MsgLayout(Box<libc::msghdr>);

impl MsgLayout {
    /// `name_bytes` of address (0: a connected socket), and the stamp's room when
    /// `stamped`.
    pub fn new(name_bytes: usize, stamped: bool) -> MsgLayout {
        // SAFETY: all-zero is a valid msghdr; only its two lengths are read.
        let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
        m.msg_namelen = name_bytes as libc::socklen_t;
        m.msg_controllen = if stamped { RX_CONTROL_BYTES } else { 0 };
        MsgLayout(Box::new(m))
    }

    /// A connected socket's receive with its stamp.
    pub fn stamped() -> MsgLayout {
        MsgLayout::new(0, true)
    }

    pub fn msghdr(&self) -> &libc::msghdr {
        &self.0
    }

    /// Bytes each buffer holds before the data.
    pub fn overhead(&self) -> usize {
        RECVMSG_OUT_BYTES + self.0.msg_namelen as usize + self.0.msg_controllen
    }

    /// The multishot receive of fixed file `i` into the worker's buffer group.
    pub fn recv(&self, i: usize) -> squeue::Entry {
        opcode::RecvMsgMulti::new(types::Fixed(i as u32), &*self.0, GROUP).build()
    }

    /// The data of a buffer the receive filled (`buf`: its bytes the completion names),
    /// and the data's receive stamp; no data when the buffer is not one such receive's.
    pub fn data<'a>(&self, buf: &'a [u8]) -> (&'a [u8], Option<u64>) {
        let Ok(out) = types::RecvMsgOut::parse(buf, &self.0) else {
            return (&[], None);
        };
        // The data is a slice of `buf` (the parser's borrows end with it).
        let data = out.payload_data();
        let at = data.as_ptr() as usize - buf.as_ptr() as usize;
        (&buf[at..at + data.len()], rx_stamp_of(out.control_data()))
    }
}

/// A TCP echo connection's stages: its readings, and the send of its answers with their
/// figures. Boxed: the ring reads the vector and the figures where they are until the
/// send completes (one send in flight a connection).
pub(crate) struct EchoSends {
    stamps: EchoStamps,
    heads: Vec<[u8; FIGURE_BYTES]>,
    iov: Vec<libc::iovec>,
    msg: libc::msghdr,
    /// A sampled answer's ask for its send's stamps (the whole send's).
    control: TxControl,
}

impl EchoSends {
    /// For sends of up to `batch` answers of `response_bytes`.
    pub fn new(
        batch: usize,
        response_bytes: usize,
        clock_shift_ns: i64,
        sampling: Sampling,
    ) -> Box<EchoSends> {
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        Box::new(EchoSends {
            stamps: EchoStamps::new(Some(response_bytes), clock_shift_ns, sampling),
            heads: vec![[0; FIGURE_BYTES]; batch],
            iov: vec![empty; 2 * batch],
            // SAFETY: all-zero is a valid msghdr; the vector is set at each send.
            msg: unsafe { std::mem::zeroed() },
            control: TxControl::new(None),
        })
    }

    /// Requests were read; `rx`: the last one's arrival stamp; `waiting` requests read
    /// before them not yet begun answering, `n` in this read.
    pub fn read(&mut self, rx: Option<u64>, waiting: u64, n: u64) {
        self.stamps.read(rx, waiting, n);
    }

    /// The send of `n` answers on fixed file `i`: each answer's figures (written now,
    /// just before the send), then the rest of an answer from `tx`, the answers' constant
    /// bytes.
    pub fn send(&mut self, i: usize, n: usize, tx: &[u8], response_bytes: usize) -> squeue::Entry {
        let n = n.min(self.heads.len());
        let head = FIGURE_BYTES.min(response_bytes);
        let rest = &tx[head..response_bytes];
        let mut ask = None;
        for k in 0..n {
            ask = self
                .stamps
                .answering(None, &mut self.heads[k])
                .copied()
                .or(ask);
            self.iov[2 * k] = libc::iovec {
                iov_base: self.heads[k].as_mut_ptr().cast(),
                iov_len: head,
            };
            self.iov[2 * k + 1] = libc::iovec {
                iov_base: rest.as_ptr() as *mut libc::c_void,
                iov_len: rest.len(),
            };
        }
        self.msg.msg_iov = self.iov.as_mut_ptr();
        self.msg.msg_iovlen = 2 * n;
        TxAsk::ask_on(&mut self.msg, ask.as_ref(), &mut self.control);
        opcode::SendMsg::new(types::Fixed(i as u32), &self.msg)
            .flags((libc::MSG_NOSIGNAL | libc::MSG_WAITALL) as u32)
            .build()
    }

    /// Reads the driver stamps of the answers sent so far from `fd`'s error queue.
    pub fn collect(&mut self, fd: RawFd) {
        self.stamps.collect(fd);
    }
}

/// A UDP echo's answer to `from`: the request's arrival stamp (among `control`, its
/// receive's control messages) read, and the answer's figures written behind the request's
/// header that `answer` starts with (as the kernel engine's echo does); call just before
/// sending. Returns what the send must carry to be stamped (a sampled answer's ask).
pub(crate) fn answering(
    st: &mut EchoStamps,
    (control, from): (&[u8], &SocketAddr),
    answer: &mut [u8],
) -> Option<TxControl> {
    // Every answer is counted (its send's stamp id is its count), even one too short.
    let seq = answer
        .get(..SEQ_BYTES)
        .map_or(0, |h| u64::from_le_bytes(h.try_into().expect("8 bytes")));
    st.read_udp(rx_stamp_of(control), seq as u32);
    let at = REQUEST_HEADER_BYTES.min(answer.len());
    st.answering(Some((seq as u32, peer_key(from))), &mut answer[at..])
        .copied()
}

/// A sampled send on the ring: a `SENDMSG` whose control message asks for the send's
/// stamps (`kstamps::sample`), one per request buffer, in a vector made once: the kernel
/// reads the header, vector and control where they are when the send is issued.
pub(crate) struct TxAsk {
    msg: libc::msghdr,
    iov: libc::iovec,
    control: TxControl,
}

impl TxAsk {
    pub fn new() -> TxAsk {
        TxAsk {
            // SAFETY: all-zero is a valid msghdr and iovec; set at each send.
            msg: unsafe { std::mem::zeroed() },
            iov: unsafe { std::mem::zeroed() },
            control: TxControl::new(None),
        }
    }

    /// The send of `data` on fixed file `i` with `control`'s ask (`flags`: the plain
    /// send's).
    pub fn send(
        &mut self,
        i: usize,
        data: &[u8],
        control: &TxControl,
        flags: i32,
    ) -> squeue::Entry {
        self.control = *control;
        self.iov = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        self.msg.msg_iov = &mut self.iov;
        self.msg.msg_iovlen = 1;
        self.msg.msg_control = self.control.as_ptr();
        self.msg.msg_controllen = self.control.len();
        opcode::SendMsg::new(types::Fixed(i as u32), &self.msg)
            .flags(flags as u32)
            .build()
    }

    /// Points a prepared header (a UDP answer's) at a control message that asks for its
    /// send's stamps, or at none.
    pub fn ask_on(msg: &mut libc::msghdr, control: Option<&TxControl>, keep: &mut TxControl) {
        match control {
            Some(c) => {
                *keep = *c;
                msg.msg_control = keep.as_ptr();
                msg.msg_controllen = keep.len();
            }
            None => {
                msg.msg_control = std::ptr::null_mut();
                msg.msg_controllen = 0;
            }
        }
    }
}
