//! The only code that touches a control socket: waits for bytes with a deadline, feeds them
//! to a protocol session and writes whatever it queued. Sessions stay sans-IO.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use sonde_proto::{ProtoError, Session};

/// A control connection: TCP between hosts, a Unix socket pair in the run layer's tests.
pub trait Stream: Read + Write + AsRawFd + Send {
    fn half_close(&self) -> io::Result<()>;
}

impl Stream for TcpStream {
    fn half_close(&self) -> io::Result<()> {
        self.shutdown(Shutdown::Write)
    }
}

impl Stream for UnixStream {
    fn half_close(&self) -> io::Result<()> {
        self.shutdown(Shutdown::Write)
    }
}

/// What woke a wait.
pub enum Wake {
    /// Bytes from the peer, in the link's buffer.
    Data(usize),
    Eof,
    /// The other fd given to `wait` is readable (a listener with a connection to accept).
    Other,
    Timeout,
}

pub struct Link {
    stream: Box<dyn Stream>,
    buf: Vec<u8>,
}

/// Longest single sleep: a safety net only, since stop signals wake the wait through
/// `signals::wake_fd`.
pub const MAX_WAIT: Duration = Duration::from_secs(1);

impl Link {
    pub fn new(stream: TcpStream) -> io::Result<Link> {
        stream.set_write_timeout(Some(Duration::from_secs(5)))?;
        stream.set_nodelay(true)?;
        Ok(Link::over(Box::new(stream)))
    }

    /// A link over any stream, as it is (the caller set its options).
    pub fn over(stream: Box<dyn Stream>) -> Link {
        Link {
            stream,
            buf: vec![0; 64 * 1024],
        }
    }

    /// The connection's descriptor, for a `poll` set.
    pub fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// Writes every frame the session queued.
    pub fn send(&mut self, session: &mut impl Session) -> io::Result<()> {
        self.flush(|| session.poll_transmit())
    }

    /// One wait, until the session's deadline or `deadline` if sooner (or `other` is
    /// readable), and what woke it fed to the session. `Wake::Other` is returned for the
    /// caller; a lost connection is the session's end of stream.
    pub fn step(
        &mut self,
        session: &mut impl Session,
        deadline: Option<Instant>,
        other: Option<RawFd>,
    ) -> Result<Option<Wake>, ProtoError> {
        let deadline = [deadline, session.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        match self.wait(deadline, other) {
            Ok(Wake::Data(n)) => session.handle_bytes(&self.buf[..n], Instant::now())?,
            Ok(Wake::Eof) | Err(_) => session.handle_eof()?,
            Ok(Wake::Other) => return Ok(Some(Wake::Other)),
            Ok(Wake::Timeout) => session.handle_timeout(Instant::now())?,
        }
        Ok(None)
    }

    /// Writes every frame `next` yields.
    pub fn flush(&mut self, mut next: impl FnMut() -> Option<Vec<u8>>) -> io::Result<()> {
        while let Some(frame) = next() {
            self.stream.write_all(&frame)?;
        }
        Ok(())
    }

    /// Half-closes and reads what the peer still sends, for up to `linger`, so that the
    /// close is a FIN and not a reset: a reset can destroy our last frame (an error saying
    /// why) before the peer reads it.
    pub fn close_gracefully(&mut self, linger: Duration) {
        let _ = self.stream.half_close();
        let until = Instant::now() + linger;
        while Instant::now() < until {
            match self.wait(Some(until), None) {
                Ok(Wake::Data(_)) | Ok(Wake::Other) => {}
                // Early: a stop signal woke us; we are shutting down anyway.
                Ok(Wake::Timeout) if Instant::now() < until => break,
                Ok(Wake::Timeout) => {}
                Ok(Wake::Eof) | Err(_) => break,
            }
        }
    }

    /// Waits until bytes arrive, `other` is readable, or `deadline` (capped at MAX_WAIT).
    pub fn wait(&mut self, deadline: Option<Instant>, other: Option<RawFd>) -> io::Result<Wake> {
        let now = Instant::now();
        let until = deadline.map_or(now + MAX_WAIT, |d| d.min(now + MAX_WAIT));
        let timeout_ms = until
            .saturating_duration_since(now)
            .as_micros()
            .div_ceil(1000) as i32;
        let mut fds = [
            libc::pollfd {
                fd: self.stream.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: other.unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two live pollfds; a negative fd is ignored by poll.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(Wake::Timeout)
            } else {
                Err(e)
            };
        }
        if fds[0].revents != 0 {
            return match self.stream.read(&mut self.buf) {
                Ok(0) => Ok(Wake::Eof),
                Ok(n) => Ok(Wake::Data(n)),
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Ok(Wake::Eof),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Wake::Timeout),
                Err(e) => Err(e),
            };
        }
        if fds[1].revents != 0 {
            return Ok(Wake::Other);
        }
        Ok(Wake::Timeout)
    }
}
