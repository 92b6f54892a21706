//! A controller's proof of the key at accept, before it needs a handshake place (issue
//! 52): `Hello` carries a ticket, HMAC(key, "ticket", its nonce, the agent address it
//! dialled, its wall-clock time in ms). An agent whose ordinary places are taken (strangers
//! holding them, its own address shared with them) reads the connection's first frame and,
//! for a ticket that checks, gives the connection one of the places kept for key holders,
//! which no connection without one can take. The ticket proves only that someone with the
//! key made it for this agent within [`TICKET_WINDOW`]; the handshake's proofs still follow.
//! Each nonce is honoured once ([`TicketGate`]'s replay cache), so a ticket captured on the
//! path buys nothing twice. Sans-IO: the caller gives the time and the bytes.

use std::collections::{HashSet, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use hmac::Mac;
use serde::{Deserialize, Serialize};

use crate::auth::{Key, CHALLENGE_BYTES};

/// How far a ticket's time may be from the agent's clock, either way: hosts of a fleet
/// keep time to milliseconds (NTP, chrony); a clock off by more only loses the reserved
/// places (the ticket is ignored and the connection is placed as one without it).
pub const TICKET_WINDOW: Duration = Duration::from_secs(30);

/// Tickets remembered as used. A nonce is kept for twice [`TICKET_WINDOW`] from its use (a
/// ticket is good for at most that long), so this allows 4,096 tickets a minute, far more
/// than the tests an agent serves; beyond it a ticket is not honoured (never a replay).
pub const TICKETS_REMEMBERED: usize = 4096;

/// A controller's ticket, in its `Hello`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    /// The controller's wall-clock time, ms since the Unix epoch.
    pub unix_ms: u64,
    /// Hex of HMAC(key, "ticket", nonce, agent, unix_ms).
    pub mac: String,
}

impl Ticket {
    /// The ticket for a `Hello` with `nonce` to the agent dialled at `agent`, at `unix_ms`.
    pub fn new(key: &Key, nonce: &[u8], agent: &str, unix_ms: u64) -> Ticket {
        let mac = ticket_mac(key, nonce, agent, unix_ms)
            .finalize()
            .into_bytes();
        Ticket {
            unix_ms,
            mac: hex::encode(mac),
        }
    }
}

fn ticket_mac(key: &Key, nonce: &[u8], agent: &str, unix_ms: u64) -> crate::auth::HmacSha256 {
    key.mac(&[b"ticket", nonce, agent.as_bytes(), &unix_ms.to_be_bytes()])
}

/// Why a ticket is not honoured: the connection is then placed as one without it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TicketRefused {
    #[error("its Hello carries no ticket")]
    Missing,
    #[error("its ticket's nonce is not {CHALLENGE_BYTES} bytes of hex")]
    Malformed,
    #[error("its ticket names {0:?}, which is not this agent")]
    NotThisAgent(String),
    #[error("its ticket is {skew_s:.0} s from this agent's clock, beyond the {} s allowed", TICKET_WINDOW.as_secs())]
    Stale { skew_s: f64 },
    #[error("its ticket was not made with this agent's key")]
    BadMac,
    #[error("its ticket was used before (a replay)")]
    Replayed,
    #[error("{TICKETS_REMEMBERED} tickets were honoured in the last minute")]
    Full,
}

/// The agent's check of tickets: the key, the window and the nonces already honoured.
pub struct TicketGate {
    key: Key,
    /// Honoured nonces, and when each may be forgotten, oldest first.
    used: VecDeque<([u8; CHALLENGE_BYTES], Instant)>,
    seen: HashSet<[u8; CHALLENGE_BYTES]>,
}

impl TicketGate {
    pub fn new(key: Key) -> TicketGate {
        TicketGate {
            key,
            used: VecDeque::new(),
            seen: HashSet::new(),
        }
    }

    /// Checks the ticket of a `Hello` (`nonce`, `agent`) that reached this agent at one of
    /// `reached_at`, at `unix_ms` on this agent's clock and `now` on its monotonic one; a
    /// ticket that checks is remembered, so it is honoured once.
    pub fn check(
        &mut self,
        hello: (&str, &str, Option<&Ticket>),
        reached_at: &[IpAddr],
        unix_ms: u64,
        now: Instant,
    ) -> Result<(), TicketRefused> {
        let (nonce, agent, ticket) = hello;
        let ticket = ticket.ok_or(TicketRefused::Missing)?;
        let nonce: [u8; CHALLENGE_BYTES] = hex::decode(nonce)
            .ok()
            .and_then(|n| n.try_into().ok())
            .ok_or(TicketRefused::Malformed)?;
        let named = agent.parse::<IpAddr>().ok().map(|ip| ip.to_canonical());
        if !named.is_some_and(|ip| reached_at.iter().any(|r| r.to_canonical() == ip)) {
            return Err(TicketRefused::NotThisAgent(agent.into()));
        }
        let skew_ms = unix_ms.abs_diff(ticket.unix_ms);
        if skew_ms > TICKET_WINDOW.as_millis() as u64 {
            return Err(TicketRefused::Stale {
                skew_s: skew_ms as f64 / 1000.0,
            });
        }
        let mac = hex::decode(&ticket.mac).map_err(|_| TicketRefused::BadMac)?;
        ticket_mac(&self.key, &nonce, agent, ticket.unix_ms)
            .verify_slice(&mac)
            .map_err(|_| TicketRefused::BadMac)?;
        self.forget_before(now);
        if self.seen.contains(&nonce) {
            return Err(TicketRefused::Replayed);
        }
        if self.used.len() >= TICKETS_REMEMBERED {
            return Err(TicketRefused::Full);
        }
        self.seen.insert(nonce);
        self.used.push_back((nonce, now + 2 * TICKET_WINDOW));
        Ok(())
    }

    fn forget_before(&mut self, now: Instant) {
        while let Some((nonce, until)) = self.used.front() {
            if *until > now {
                break;
            }
            self.seen.remove(nonce);
            self.used.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{encode, first_frame, FirstFrame};
    use crate::message::{Message, MAGIC};

    const AGENT: &str = "198.18.0.2";
    const T: u64 = 1_800_000_000_000;

    fn key() -> Key {
        Key::from_file_bytes(b"the fleet's key of some length").unwrap()
    }

    fn here() -> Vec<IpAddr> {
        vec![AGENT.parse().unwrap()]
    }

    fn hello(nonce: &[u8; 32], ticket: &Ticket) -> (String, Ticket) {
        (hex::encode(nonce), ticket.clone())
    }

    #[test]
    fn a_ticket_checks_once_for_its_agent_key_and_time() {
        let mut gate = TicketGate::new(key());
        let now = Instant::now();
        let t = Ticket::new(&key(), &[1; 32], AGENT, T);
        let (n, t) = hello(&[1; 32], &t);
        gate.check((&n, AGENT, Some(&t)), &here(), T + 29_000, now)
            .unwrap();
        // The same Hello again, from anywhere, at once or a minute on: a replay.
        let again = gate.check((&n, AGENT, Some(&t)), &here(), T + 29_000, now);
        assert_eq!(again, Err(TicketRefused::Replayed));
        let later = now + Duration::from_secs(59);
        assert_eq!(
            gate.check((&n, AGENT, Some(&t)), &here(), T - 29_000, later),
            Err(TicketRefused::Replayed)
        );
        // Forgotten only once it is stale anyway.
        let gone = now + 2 * TICKET_WINDOW;
        assert!(matches!(
            gate.check((&n, AGENT, Some(&t)), &here(), T + 61_000, gone),
            Err(TicketRefused::Stale { .. })
        ));
    }

    #[test]
    fn a_wrong_key_agent_time_or_nonce_is_refused_and_not_remembered() {
        let mut gate = TicketGate::new(key());
        let now = Instant::now();
        let other = Key::from_file_bytes(b"another key of the same length").unwrap();
        let n = hex::encode([2; 32]);
        let forged = Ticket::new(&other, &[2; 32], AGENT, T);
        assert_eq!(
            gate.check((&n, AGENT, Some(&forged)), &here(), T, now),
            Err(TicketRefused::BadMac)
        );
        // A ticket for another agent of the fleet, relayed here with its Hello.
        let elsewhere = Ticket::new(&key(), &[2; 32], "198.18.0.3", T);
        assert_eq!(
            gate.check((&n, "198.18.0.3", Some(&elsewhere)), &here(), T, now),
            Err(TicketRefused::NotThisAgent("198.18.0.3".into()))
        );
        // ... and with the Hello rewritten to name this agent: the MAC names the other.
        assert_eq!(
            gate.check((&n, AGENT, Some(&elsewhere)), &here(), T, now),
            Err(TicketRefused::BadMac)
        );
        let good = Ticket::new(&key(), &[2; 32], AGENT, T);
        let e = gate.check((&n, AGENT, Some(&good)), &here(), T + 31_000, now);
        assert_eq!(e, Err(TicketRefused::Stale { skew_s: 31.0 }));
        assert_eq!(
            e.unwrap_err().to_string(),
            "its ticket is 31 s from this agent's clock, beyond the 30 s allowed"
        );
        assert!(matches!(
            gate.check((&n, AGENT, Some(&good)), &here(), T - 31_000, now),
            Err(TicketRefused::Stale { .. })
        ));
        // Another nonce than the ticket's; its time moved; a missing or cut MAC.
        let n3 = hex::encode([3; 32]);
        assert_eq!(
            gate.check((&n3, AGENT, Some(&good)), &here(), T, now),
            Err(TicketRefused::BadMac)
        );
        let moved = Ticket {
            unix_ms: T + 1,
            ..good.clone()
        };
        assert_eq!(
            gate.check((&n, AGENT, Some(&moved)), &here(), T, now),
            Err(TicketRefused::BadMac)
        );
        let cut = Ticket {
            mac: good.mac[..62].into(),
            ..good.clone()
        };
        assert_eq!(
            gate.check((&n, AGENT, Some(&cut)), &here(), T, now),
            Err(TicketRefused::BadMac)
        );
        assert_eq!(
            gate.check((&n, AGENT, None), &here(), T, now),
            Err(TicketRefused::Missing)
        );
        assert_eq!(
            gate.check(("00", AGENT, Some(&good)), &here(), T, now),
            Err(TicketRefused::Malformed)
        );
        // None of those used the nonce up: the good ticket still checks, once.
        gate.check((&n, AGENT, Some(&good)), &here(), T, now)
            .unwrap();
        assert_eq!(gate.used.len(), 1);
    }

    #[test]
    fn the_replay_cache_is_bounded_and_refuses_rather_than_forgets() {
        let mut gate = TicketGate::new(key());
        let now = Instant::now();
        for k in 0..TICKETS_REMEMBERED as u32 {
            let mut nonce = [0u8; 32];
            nonce[..4].copy_from_slice(&k.to_be_bytes());
            let t = Ticket::new(&key(), &nonce, AGENT, T);
            gate.check((&hex::encode(nonce), AGENT, Some(&t)), &here(), T, now)
                .unwrap();
        }
        let t = Ticket::new(&key(), &[9; 32], AGENT, T);
        let n = hex::encode([9; 32]);
        assert_eq!(
            gate.check((&n, AGENT, Some(&t)), &here(), T, now),
            Err(TicketRefused::Full)
        );
        let later = now + 2 * TICKET_WINDOW;
        gate.check((&n, AGENT, Some(&t)), &here(), T, later)
            .unwrap();
        assert_eq!(gate.used.len(), 1, "the expired were forgotten");
    }

    #[test]
    fn a_controllers_hello_carries_a_ticket_the_agent_honours_only_with_its_key() {
        use crate::session::Session;
        let spec = sonde_results::TestSpec::Ping(Default::default());
        let t0 = Instant::now();
        let hello = |key: Option<Key>, at: Option<u64>| {
            let mut c = crate::ClientSession::new(spec.clone(), "s", "c", Default::default(), t0)
                .with_nonce([6; 32])
                .with_key(key)
                .dialling(AGENT.parse().unwrap());
            if let Some(ms) = at {
                c = c.with_ticket_at(ms);
            }
            first_frame(&c.poll_transmit().unwrap())
        };
        let FirstFrame::Hello {
            nonce,
            agent,
            ticket,
        } = hello(Some(key()), Some(T))
        else {
            panic!("not a Hello")
        };
        let mut gate = TicketGate::new(key());
        gate.check((&nonce, &agent, ticket.as_ref()), &here(), T + 5, t0)
            .unwrap();
        // No key, or no clock given: no ticket.
        assert!(matches!(
            hello(None, Some(T)),
            FirstFrame::Hello { ticket: None, .. }
        ));
        assert!(matches!(
            hello(Some(key()), None),
            FirstFrame::Hello { ticket: None, .. }
        ));
    }

    #[test]
    fn the_first_frame_is_read_up_to_a_hello_and_its_ticket() {
        let t = Ticket::new(&key(), &[4; 32], AGENT, T);
        let frame = encode(&Message::Hello {
            magic: MAGIC.into(),
            version: crate::PROTOCOL_VERSION,
            software: "sonde".into(),
            nonce: hex::encode([4; 32]),
            agent: AGENT.into(),
            ticket: Some(t.clone()),
        })
        .unwrap();
        assert_eq!(first_frame(&frame[..frame.len() - 1]), FirstFrame::NeedMore);
        assert_eq!(
            first_frame(&frame),
            FirstFrame::Hello {
                nonce: hex::encode([4; 32]),
                agent: AGENT.into(),
                ticket: Some(t)
            }
        );
        // A frame longer than a Hello may be, garbage, another message.
        assert_eq!(first_frame(&[0, 1, 0, 0, b'{']), FirstFrame::Other);
        assert_eq!(first_frame(b"GET / HTTP/1.1\r\n\r\n"), FirstFrame::Other);
        let start = encode(&Message::Start).unwrap();
        assert_eq!(first_frame(&start), FirstFrame::Other);
    }
}
