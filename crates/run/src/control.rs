//! The only code that touches a control socket: waits for bytes with a deadline and writes
//! whatever a protocol session queued. Sessions stay sans-IO.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// What woke a wait.
pub enum Wake {
    /// Bytes from the peer, in the link's buffer (see [`Link::received`]).
    Data(usize),
    Eof,
    /// The other fd given to `wait` is readable (a listener with a connection to accept).
    Other,
    Timeout,
}

pub struct Link {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// Longest single sleep: a safety net only, since stop signals wake the wait through
/// `signals::wake_fd`.
pub const MAX_WAIT: Duration = Duration::from_secs(1);

impl Link {
    pub fn new(stream: TcpStream) -> io::Result<Link> {
        stream.set_write_timeout(Some(Duration::from_secs(5)))?;
        stream.set_nodelay(true)?;
        Ok(Link {
            stream,
            buf: vec![0; 64 * 1024],
        })
    }

    pub fn received(&self, n: usize) -> &[u8] {
        &self.buf[..n]
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
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
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
