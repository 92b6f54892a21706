//! An agent that says "busy" is tried again for a while before the controller gives up
//! (issue 52: a controller gave up at the first "busy", and a flood from its own address
//! failed a real test). Busy is an agent's `--max-tests` in use, or its handshake places
//! held; both pass (a test ends, a handshake's places come back within 2 s of accept).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sonde_proto::{PeerError, ProtoError};

use super::{connect, ControllerError};
use crate::control::Link;
use crate::signals::Interrupt;

/// How long a controller keeps trying an agent that says "busy": past two handshake
/// deadlines (2 s each), so places held by strangers have come back twice.
pub const BUSY_RETRY_FOR: Duration = Duration::from_secs(5);
/// The first wait between tries; each next one doubles, up to [`BUSY_MOST_WAIT`].
const BUSY_FIRST_WAIT: Duration = Duration::from_millis(100);
const BUSY_MOST_WAIT: Duration = Duration::from_secs(1);

/// Connects to `addr` and hands the link to `attempt` (a handshake with a fresh session);
/// again after a wait while the agent says "busy", for at most [`BUSY_RETRY_FOR`].
pub(crate) fn until_served<T>(
    addr: SocketAddr,
    interrupt: &Interrupt,
    attempt: impl FnMut(Link) -> Result<T, ControllerError>,
) -> Result<T, ControllerError> {
    until_served_within(addr, interrupt, BUSY_RETRY_FOR, attempt)
}

fn until_served_within<T>(
    addr: SocketAddr,
    interrupt: &Interrupt,
    within: Duration,
    mut attempt: impl FnMut(Link) -> Result<T, ControllerError>,
) -> Result<T, ControllerError> {
    let first = Instant::now();
    let mut wait = BUSY_FIRST_WAIT;
    let mut tries = 0u32;
    loop {
        tries += 1;
        match attempt(connect(addr)?) {
            Err(e) if is_busy(&e) => {
                if first.elapsed() + wait > within {
                    return Err(ControllerError::Busy {
                        addr,
                        tries,
                        secs: first.elapsed().as_secs_f64(),
                        within_s: within.as_secs_f64(),
                    });
                }
                // Once, on stderr, as `--tune`'s warnings: a controller's commands log
                // nothing else, and a user waiting should know why.
                if tries == 1 {
                    eprintln!(
                        "note: the agent at {addr} is busy; trying again in {:.1} s (for up to {:.0} s in all)",
                        wait.as_secs_f64(),
                        within.as_secs_f64()
                    );
                }
                if !sleep_unless_interrupted(wait, interrupt) {
                    return Err(ControllerError::Interrupted);
                }
                wait = (wait * 2).min(BUSY_MOST_WAIT);
            }
            other => return other,
        }
    }
}

fn is_busy(e: &ControllerError) -> bool {
    matches!(
        e,
        ControllerError::Protocol {
            source: ProtoError::Peer(PeerError::Busy),
            ..
        }
    )
}

/// Sleeps `d`, or less if interrupted: whether it slept it all.
fn sleep_unless_interrupted(d: Duration, interrupt: &Interrupt) -> bool {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if interrupt.is_set() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20).min(until - Instant::now()));
    }
    !interrupt.is_set()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::running::handshake;
    use sonde_proto::{AgentSession, ClientSession, Session, Timeouts};
    use std::net::TcpListener;

    /// An agent that says "busy" to each of its first `busy` connections, then `Welcome`.
    fn agent(busy: usize) -> (SocketAddr, std::thread::JoinHandle<usize>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let mut n = 0;
            for c in l.incoming().take(busy) {
                let mut s = AgentSession::busy(Instant::now());
                let mut link = Link::new(c.unwrap()).unwrap();
                let _ = link.flush(|| s.poll_transmit());
                n += 1;
            }
            n
        });
        (addr, h)
    }

    fn attempt(addr: SocketAddr) -> impl FnMut(Link) -> Result<(), ControllerError> {
        move |mut link| {
            let spec = sonde_results::TestSpec::Ping(Default::default());
            let mut s = ClientSession::new(spec, "t", "t", Timeouts::default(), Instant::now());
            handshake(&mut link, &mut s, addr, &Interrupt::none()).map(|_| ())
        }
    }

    #[test]
    fn a_busy_agent_is_tried_again_with_growing_waits_then_given_up_naming_how_long() {
        let (addr, served) = agent(4);
        let t0 = Instant::now();
        let e = until_served_within(
            addr,
            &Interrupt::none(),
            Duration::from_millis(1000),
            attempt(addr),
        )
        .unwrap_err();
        let took = t0.elapsed();
        // Tries at 0, 0.1, 0.3, 0.7 s; the next wait (0.8 s) would pass 1 s.
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("agent at {addr}: the agent is busy"))
                && text.contains("tried 4 times in 0.")
                && text.ends_with(" s (a controller tries a busy agent for up to 1 s, waiting 0.1 s doubling to 1 s between tries) and gave up"),
            "{text}"
        );
        assert!(took >= Duration::from_millis(700), "{took:?}");
        assert_eq!(served.join().unwrap(), 4, "four connections");
    }
}
