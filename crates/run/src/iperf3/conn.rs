//! The only code that touches an iperf3 control socket: write what a machine queued, wait
//! for bytes until a deadline (never longer than a slice, so the caller can sample its
//! side meanwhile), and say what came.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use sonde_proto::iperf3::{Endpoint, Iperf3Error, Machine};

/// How often an accept loop looks at its stop flag.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// Longest single wait: the caller's side samples on its own schedule in between.
const SLICE: Duration = Duration::from_millis(50);

pub(crate) enum Got<'a> {
    Bytes(&'a [u8]),
    Eof,
    Nothing,
}

/// Why a turn on the control connection failed: the socket, or what the peer sent.
pub(crate) enum Turn {
    Io(io::Error),
    Protocol(Iperf3Error),
}

pub(crate) struct Control {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Control {
    pub fn new(stream: TcpStream) -> io::Result<Control> {
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(Duration::from_secs(5)))?;
        Ok(Control {
            stream,
            buf: vec![0; 16 * 1024],
        })
    }

    /// Writes every frame `next` yields.
    pub fn flush(&mut self, mut next: impl FnMut() -> Option<Vec<u8>>) -> io::Result<()> {
        while let Some(frame) = next() {
            self.stream.write_all(&frame)?;
        }
        Ok(())
    }

    /// One turn of machine `m` on this connection: writes what it queued, reads once
    /// (until `deadline` or `m`'s own at most, and at most a slice) and feeds it what came.
    pub fn turn<E: Endpoint>(
        &mut self,
        m: &mut Machine<E>,
        deadline: Option<Instant>,
    ) -> Result<(), Turn> {
        self.flush(|| m.poll_transmit()).map_err(Turn::Io)?;
        let deadline = [deadline, m.deadline()].into_iter().flatten().min();
        let got = self.read(deadline).map_err(Turn::Io)?;
        let now = Instant::now();
        let fed = match got {
            Got::Bytes(b) => m.handle_bytes(b, now),
            Got::Eof => m.handle_eof(),
            Got::Nothing => m.handle_timeout(now),
        };
        fed.map_err(Turn::Protocol)
    }

    /// One read, waiting until `deadline` at most (and at most a slice). The wait is
    /// ppoll(2)'s (`engine::wait`), a high-resolution timer: the socket's own read timeout (SO_RCVTIMEO)
    /// counts in jiffies and rounds up, so a wait for an interval's edge woke 4 to 8 ms
    /// late on a 250 Hz kernel, and each side's first interval ran that much long (the
    /// last that much short) against iperf3's whole seconds.
    pub fn read(&mut self, deadline: Option<Instant>) -> io::Result<Got<'_>> {
        let now = Instant::now();
        let wait = deadline
            .map_or(SLICE, |d| d.saturating_duration_since(now))
            .clamp(Duration::from_micros(50), SLICE);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.stream);
        if !sonde_engine::wait::wait_readable(fd, now, Some(now + wait))? {
            return Ok(Got::Nothing);
        }
        // Readable: the read returns at once; the timeout only bounds a surprise.
        self.stream.set_read_timeout(Some(SLICE))?;
        match self.stream.read(&mut self.buf) {
            Ok(0) => Ok(Got::Eof),
            Ok(n) => Ok(Got::Bytes(&self.buf[..n])),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(Got::Nothing)
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Ok(Got::Eof),
            Err(e) => Err(e),
        }
    }
}

/// Waits up to [`LOOK_EVERY`] for a connection on `listener`.
pub(crate) fn accept_within(listener: &TcpListener) -> Option<(TcpStream, SocketAddr)> {
    use std::os::fd::AsRawFd;
    let mut fd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let r = unsafe { libc::poll(&mut fd, 1, LOOK_EVERY.as_millis() as i32) };
    if r <= 0 {
        return None;
    }
    let (s, peer) = listener.accept().ok()?;
    s.set_nonblocking(false).ok()?;
    Some((s, peer))
}
