//! The header that opens every TCP data connection: the test's cookie (from `Ready`) and the
//! connection's test-wide index, so that the agent accepts only the controller's
//! connections and puts each in its place whatever order they arrive in.

/// Cookie (8 bytes) and connection index (4 bytes), both big-endian.
pub const DATA_HEADER_BYTES: usize = 12;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    pub cookie: u64,
    pub index: u32,
}

/// Why the agent turned a data connection away.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataHeaderError {
    #[error("wrong cookie")]
    Cookie,
    #[error("index {index} outside the test's {total} connections")]
    Index { index: u32, total: usize },
}

impl DataHeader {
    pub fn encode(&self) -> [u8; DATA_HEADER_BYTES] {
        let mut b = [0u8; DATA_HEADER_BYTES];
        b[..8].copy_from_slice(&self.cookie.to_be_bytes());
        b[8..].copy_from_slice(&self.index.to_be_bytes());
        b
    }

    pub fn decode(b: &[u8; DATA_HEADER_BYTES]) -> DataHeader {
        let (cookie, index) = b.split_at(8);
        DataHeader {
            cookie: u64::from_be_bytes(cookie.try_into().expect("8 bytes")),
            index: u32::from_be_bytes(index.try_into().expect("4 bytes")),
        }
    }

    /// Decodes and checks a header against the test's cookie and connection count; the
    /// index it returns is safe to use as a slot.
    pub fn accept(
        b: &[u8; DATA_HEADER_BYTES],
        cookie: u64,
        total: usize,
    ) -> Result<usize, DataHeaderError> {
        let h = DataHeader::decode(b);
        if h.cookie != cookie {
            return Err(DataHeaderError::Cookie);
        }
        let index = h.index as usize;
        if index >= total {
            return Err(DataHeaderError::Index {
                index: h.index,
                total,
            });
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_checks() {
        let h = DataHeader {
            cookie: 0x0102_0304_0506_0708,
            index: 7,
        };
        let b = h.encode();
        assert_eq!(&b[..4], &[1, 2, 3, 4]);
        assert_eq!(DataHeader::decode(&b), h);
        assert_eq!(DataHeader::accept(&b, h.cookie, 8), Ok(7));
        assert_eq!(
            DataHeader::accept(&b, h.cookie, 7),
            Err(DataHeaderError::Index { index: 7, total: 7 })
        );
        assert_eq!(DataHeader::accept(&b, 1, 8), Err(DataHeaderError::Cookie));
    }
}
