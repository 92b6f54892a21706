//! The reading half of iperf3's control framing: one state byte, a fixed number of bytes,
//! or a 4-byte big-endian length and that much JSON. "Need more bytes" is `Ok(None)`; a
//! length over the limit is refused before any of it is buffered.

use super::Iperf3Error;

/// Bytes received on a control connection and not yet taken.
#[derive(Debug, Default)]
pub struct Reader {
    buf: Vec<u8>,
}

impl Reader {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The next `n` bytes, once they are all here.
    pub fn take(&mut self, n: usize) -> Option<Vec<u8>> {
        if self.buf.len() < n {
            return None;
        }
        let rest = self.buf.split_off(n);
        Some(std::mem::replace(&mut self.buf, rest))
    }

    /// The next state byte.
    pub fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    /// The next length-prefixed JSON text, at most `max` bytes, parsed as `T`.
    pub fn json<T: serde::de::DeserializeOwned>(
        &mut self,
        what: &'static str,
        max: u32,
    ) -> Result<Option<T>, Iperf3Error> {
        let Some(head) = self.buf.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        if len == 0 {
            return Err(Iperf3Error::Empty(what));
        }
        if len > max {
            return Err(Iperf3Error::TooLong {
                what,
                bytes: len,
                max,
            });
        }
        if self.buf.len() < 4 + len as usize {
            return Ok(None);
        }
        let frame = self.take(4 + len as usize).unwrap_or_default();
        serde_json::from_slice(&frame[4..])
            .map(Some)
            .map_err(|e| Iperf3Error::BadJson {
                what,
                reason: e.to_string(),
            })
    }
}

/// `value` as a length-prefixed JSON frame.
pub fn encode_json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    let text = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    let mut out = Vec::with_capacity(4 + text.len());
    out.extend_from_slice(&(text.len() as u32).to_be_bytes());
    out.extend_from_slice(&text);
    out
}
