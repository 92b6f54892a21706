//! Where a connection waits when no ordinary handshake place is free (issue 52): for its
//! first frame, at most [`DOOR_WAIT`] from accept, so that a key holder's `Hello` can show
//! its ticket and take a place kept for key holders. A controller writes `Hello` as soon as
//! its connect returns, so it arrives with the handshake's last ACK, whatever the round
//! trip. The door is read by the accept loop itself (non-blocking sockets, one poll), and
//! bounded: a newcomer always comes in, and the entry pushed out (told "busy") is the
//! oldest of the newcomer's address when it has [`PER_ADDRESS`] waiting, else of its
//! network when that has [`PER_NETWORK`], else the oldest of the network with the most
//! waiting. So strangers in other networks never push a key holder out before its
//! `Hello`, and those in its own network or at its own address only by opening that many
//! connections within the moment its `Hello` takes to arrive.

use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use sonde_proto::frame::{first_frame, FirstFrame};
use sonde_proto::PRE_AUTH_FRAME_BYTES;

use super::sources::{canonical, network_of};

/// How long a connection waits at the door for its first frame.
pub(super) const DOOR_WAIT: Duration = Duration::from_millis(500);
/// Connections waiting at the door, in all.
pub(super) const WAITING: usize = 64;
/// ... from one address.
pub(super) const PER_ADDRESS: usize = 4;
/// ... from one /24 (IPv4) or /64 (IPv6).
pub(super) const PER_NETWORK: usize = 16;

/// A connection at the door.
pub(super) struct Waiting {
    pub(super) stream: TcpStream,
    pub(super) peer: SocketAddr,
    pub(super) accepted: Instant,
    /// What it sent so far: handed to its session if it is let in.
    pub(super) bytes: Vec<u8>,
}

/// What became of a connection at the door.
pub(super) enum Left {
    /// Its first frame came (or anything that is not one, or its end): `first` says what.
    Spoke(Waiting, FirstFrame),
    /// Pushed out by a newcomer (`true`), or silent past [`DOOR_WAIT`]: tell it "busy".
    Turned(Waiting, bool),
}

#[derive(Default)]
pub(super) struct Door {
    waiting: Vec<Waiting>,
}

impl Door {
    /// Lets `w` in (its socket made non-blocking); what it pushed out, if anything.
    pub(super) fn admit(&mut self, w: Waiting) -> io::Result<Option<Left>> {
        w.stream.set_nonblocking(true)?;
        let sources: Vec<IpAddr> = self.waiting.iter().map(|w| w.peer.ip()).collect();
        let out =
            evictee(&sources, w.peer.ip()).map(|k| Left::Turned(self.waiting.remove(k), true));
        self.waiting.push(w);
        Ok(out)
    }

    /// The sockets to poll, in the order `read` takes their events.
    pub(super) fn fds(&self) -> Vec<RawFd> {
        self.waiting.iter().map(|w| w.stream.as_raw_fd()).collect()
    }

    /// When the next waiting connection's time is up.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.waiting.iter().map(|w| w.accepted + DOOR_WAIT).min()
    }

    /// Reads the connections `ready` says have bytes (by their place in `fds`), and turns
    /// away those whose time is up at `now`: what left the door.
    pub(super) fn step(&mut self, ready: &[bool], now: Instant) -> Vec<Left> {
        let mut left = Vec::new();
        let mut kept = Vec::with_capacity(self.waiting.len());
        for (k, mut w) in self.waiting.drain(..).enumerate() {
            let readable = ready.get(k).copied().unwrap_or(false);
            if readable {
                match read_first(&mut w) {
                    Ok(Some(first)) => {
                        left.push(Left::Spoke(w, first));
                        continue;
                    }
                    // Gone before it said anything whole: closed, nothing to answer.
                    Err(Gone) => continue,
                    Ok(None) => {}
                }
            }
            if now >= w.accepted + DOOR_WAIT {
                left.push(Left::Turned(w, false));
            } else {
                kept.push(w);
            }
        }
        self.waiting = kept;
        left
    }
}

/// The peer closed (or its socket failed) before its first frame was whole.
struct Gone;

/// Reads what `w` sent; its first frame once whole (or `Other` for more bytes than a
/// `Hello` may have), `None` while it is not.
fn read_first(w: &mut Waiting) -> Result<Option<FirstFrame>, Gone> {
    let most = 4 + PRE_AUTH_FRAME_BYTES;
    let mut buf = [0u8; 4096];
    let mut closed = false;
    loop {
        let room = most.saturating_sub(w.bytes.len()).min(buf.len());
        if room == 0 {
            return Ok(Some(FirstFrame::Other));
        }
        match w.stream.read(&mut buf[..room]) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => w.bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(Gone),
        }
    }
    match first_frame(&w.bytes) {
        // A Hello and the peer's close together still count: its session says why.
        FirstFrame::NeedMore if closed => Err(Gone),
        FirstFrame::NeedMore => Ok(None),
        first => Ok(Some(first)),
    }
}

/// Which of the waiting connections (their sources, oldest first) a newcomer from `ip`
/// pushes out, if any (see the module's note).
fn evictee(waiting: &[IpAddr], ip: IpAddr) -> Option<usize> {
    let ip = canonical(ip);
    let net = network_of(ip);
    let same = |f: &dyn Fn(IpAddr) -> bool| waiting.iter().filter(|w| f(**w)).count();
    let first = |f: &dyn Fn(IpAddr) -> bool| waiting.iter().position(|w| f(*w));
    if same(&|w| canonical(w) == ip) >= PER_ADDRESS {
        return first(&|w| canonical(w) == ip);
    }
    if same(&|w| network_of(w) == net) >= PER_NETWORK {
        return first(&|w| network_of(w) == net);
    }
    if waiting.len() < WAITING {
        return None;
    }
    let most = waiting
        .iter()
        .map(|w| same(&|v| network_of(v) == network_of(*w)))
        .max()?;
    first(&|w| same(&|v| network_of(v) == network_of(w)) == most)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(c: u8, d: u8) -> IpAddr {
        [198, 18, c, d].into()
    }

    #[test]
    fn an_address_or_network_pushes_out_only_its_own_oldest() {
        let mut w: Vec<IpAddr> = (0..4).map(|_| ip(200, 10)).collect();
        assert_eq!(evictee(&w, ip(200, 11)), None);
        assert_eq!(evictee(&w, ip(200, 10)), Some(0));
        // A key holder at the attackers' address waits behind their older ones: a
        // newcomer of the address pushes out the oldest, so the key holder goes only if
        // four more come before its Hello does.
        w.remove(0);
        w.push(ip(200, 10));
        assert_eq!(evictee(&w, ip(200, 10)), Some(0));
        let mut net: Vec<IpAddr> = (0..16).map(|d| ip(201, d)).collect();
        net.insert(0, ip(202, 1));
        assert_eq!(evictee(&net, ip(201, 99)), Some(1), "its network's oldest");
    }

    /// A real connection at the door of a loopback listener: its client end, and the door's.
    fn pair(l: &std::net::TcpListener) -> (TcpStream, Waiting) {
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, peer) = l.accept().unwrap();
        let w = Waiting {
            stream: s,
            peer,
            accepted: Instant::now(),
            bytes: Vec::new(),
        };
        (c, w)
    }

    #[test]
    fn a_hello_leaves_the_door_with_its_ticket_a_silent_peer_at_its_time_a_closed_one_unanswered() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut door = Door::default();
        let (mut speaker, w) = pair(&l);
        assert!(door.admit(w).unwrap().is_none());
        let (_silent, w) = pair(&l);
        assert!(door.admit(w).unwrap().is_none());
        let (closer, w) = pair(&l);
        assert!(door.admit(w).unwrap().is_none());
        let key = sonde_proto::Key::from_file_bytes(b"the fleet's key of some length").unwrap();
        let ticket = sonde_proto::Ticket::new(&key, &[1; 32], "127.0.0.1", 5);
        let hello = sonde_proto::encode(&sonde_proto::Message::Hello {
            magic: sonde_proto::MAGIC.into(),
            version: sonde_proto::PROTOCOL_VERSION,
            software: "t".into(),
            nonce: "01".repeat(32),
            agent: "127.0.0.1".into(),
            ticket: Some(ticket.clone()),
        })
        .unwrap();
        // Half now, half later: nothing leaves until the frame is whole.
        speaker.write_all(&hello[..10]).unwrap();
        drop(closer);
        std::thread::sleep(Duration::from_millis(50));
        let left = door.step(&[true, false, true], Instant::now());
        assert!(
            left.is_empty(),
            "the closed one leaves unanswered, the half Hello waits"
        );
        assert_eq!(door.fds().len(), 2);
        speaker.write_all(&hello[10..]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let left = door.step(&[true, false], Instant::now());
        match &left[..] {
            [Left::Spoke(w, FirstFrame::Hello { ticket: t, .. })] => {
                assert_eq!(t.as_ref(), Some(&ticket));
                assert_eq!(w.bytes, hello, "its bytes go on to its session");
            }
            _ => panic!("the Hello did not leave the door"),
        }
        let left = door.step(&[false], Instant::now() + DOOR_WAIT);
        assert!(
            matches!(&left[..], [Left::Turned(_, false)]),
            "the silent one, at its time"
        );
        assert!(door.fds().is_empty());
    }

    #[test]
    fn when_full_the_biggest_network_gives_way_never_a_lone_newcomer() {
        // 64 waiting: a key holder of a third network first, then strangers of two.
        let mut w = vec![ip(202, 10)];
        w.extend((0..16).map(|d| ip(200, d)));
        w.extend((0..16).map(|d| ip(201, d)));
        w.extend((0..31).map(|c| ip(c, 1)));
        assert_eq!(w.len(), WAITING);
        assert_eq!(evictee(&w, ip(100, 1)), Some(1), "the /24 of 200's oldest");
        // Every waiting one of its own network: the oldest goes, ties broken by age.
        let lone: Vec<IpAddr> = (0..64).map(|c| ip(c, 1)).collect();
        assert_eq!(evictee(&lone, ip(100, 1)), Some(0));
        assert_eq!(evictee(&lone[..63], ip(100, 1)), None);
    }
}
