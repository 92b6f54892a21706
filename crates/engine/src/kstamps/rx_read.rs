//! Which reads take the receive stamp. A stamp is worth reading only on the read that
//! completes a sampled message; every other read is a plain `recv`, which costs less
//! than a `recvmsg` with room for control messages (its header copied in and out: 0.15
//! us a read here, 7 % of a loopback ping-pong's CPU, while the stamp itself, enabled
//! and not read, costs nothing measurable). On a stream the plain read stops at the
//! boundary before the next sampled message, so that the read that completes it is a
//! stamped one whatever the messages in flight.

use super::sample::Sampling;

/// How the next read of a connection goes: stamped or not, and at most how many bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxRead {
    pub stamped: bool,
    pub len: usize,
}

/// The next read of a stream of messages of `size` bytes, into room for `room` bytes:
/// `next` is the index of the first message not yet whole, `partial` its bytes already
/// read, and no message from `until` on can be in the stream yet (a client's: the
/// requests it has not started; an echo's: none, `u64::MAX`).
#[inline]
pub fn stream_read(
    sampling: &Sampling,
    (next, partial): (u64, usize),
    size: usize,
    until: u64,
    room: usize,
) -> RxRead {
    let all = RxRead {
        stamped: true,
        len: room,
    };
    if sampling.every == 1 {
        return all;
    }
    let sampled = sampling.next_sampled(next);
    if sampled >= until {
        return RxRead {
            stamped: false,
            len: room,
        };
    }
    if sampled == next {
        return all;
    }
    // The bytes before the sampled message: at least the rest of message `next`.
    let before = u128::from(sampled - next) * size.max(1) as u128 - partial as u128;
    RxRead {
        stamped: false,
        len: before.clamp(1, room as u128) as usize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_in(every: u32) -> Sampling {
        Sampling {
            every,
            opt_id: true,
            hardware_rx: false,
        }
    }

    fn plain(len: usize) -> RxRead {
        RxRead {
            stamped: false,
            len,
        }
    }

    /// One in 4, messages of 64 bytes, room for 1,000: the read stops at the boundary
    /// before message 4, whose completing read is stamped; a sampled message not yet sent
    /// leaves the read whole.
    #[test]
    fn a_plain_read_stops_before_the_sampled_message() {
        let s = one_in(4);
        let stamped = RxRead {
            stamped: true,
            len: 1_000,
        };
        assert_eq!(stream_read(&s, (0, 0), 64, 1, 1_000), stamped);
        assert_eq!(stream_read(&s, (0, 10), 64, 1, 1_000), stamped);
        assert_eq!(stream_read(&s, (1, 0), 64, 2, 1_000), plain(1_000));
        assert_eq!(stream_read(&s, (1, 0), 64, 4, 1_000), plain(1_000));
        assert_eq!(stream_read(&s, (1, 0), 64, 5, 1_000), plain(3 * 64));
        assert_eq!(stream_read(&s, (3, 60), 64, 5, 1_000), plain(4));
        assert_eq!(stream_read(&s, (4, 0), 64, 5, 1_000), stamped);
        assert_eq!(stream_read(&s, (5, 0), 64, u64::MAX, 100), plain(100));
        assert!(stream_read(&one_in(1), (5, 0), 64, 6, 100).stamped);
    }

    /// Reading a pipelined stream with these reads (each taking all it may): every
    /// sampled message is completed by a stamped read, and only those reads are stamped.
    #[test]
    fn every_sampled_message_is_completed_by_a_stamped_read() {
        for (size, every, room) in [
            (64, 4, 1_000),
            (64, 16, 64 * 1024),
            (100, 3, 150),
            (7, 2, 5),
        ] {
            let s = one_in(every);
            let total = 200u64 * size as u64;
            let (mut at, mut stamped_reads) = (0u64, 0);
            while at < total {
                let next = at / size as u64;
                let r = stream_read(
                    &s,
                    (next, (at % size as u64) as usize),
                    size,
                    u64::MAX,
                    room,
                );
                let end = (at + r.len as u64).min(total);
                let done: Vec<u64> = (at / size as u64..end / size as u64)
                    .filter(|&m| (m + 1) * size as u64 <= end && (m + 1) * size as u64 > at)
                    .collect();
                let sampled = done.iter().any(|m| m % u64::from(every) == 0);
                assert!(
                    !sampled || r.stamped,
                    "{size} {every} {room}: {done:?} unstamped"
                );
                stamped_reads += u64::from(r.stamped);
                at = end;
            }
            // A sampled message longer than the room takes that many stamped reads.
            let per_sampled = size.div_ceil(room) as u64;
            let most = (200 / u64::from(every) + 1) * per_sampled;
            assert!(
                stamped_reads <= most,
                "{size} {every} {room}: {stamped_reads}"
            );
        }
    }
}
