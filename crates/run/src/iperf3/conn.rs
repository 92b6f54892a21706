//! The only code that touches an iperf3 control socket: write what a machine queued, wait
//! for bytes until a deadline (never longer than a slice, so the caller can sample its
//! side meanwhile), and say what came.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Longest single wait: the caller's side samples on its own schedule in between.
const SLICE: Duration = Duration::from_millis(50);

pub(crate) enum Got<'a> {
    Bytes(&'a [u8]),
    Eof,
    Nothing,
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

    /// One read, waiting until `deadline` at most (and at most a slice).
    pub fn read(&mut self, deadline: Option<Instant>) -> io::Result<Got<'_>> {
        let now = Instant::now();
        let wait = deadline
            .map_or(SLICE, |d| d.saturating_duration_since(now))
            .clamp(Duration::from_millis(1), SLICE);
        self.stream.set_read_timeout(Some(wait))?;
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
