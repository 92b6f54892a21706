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
    mut attempt: impl FnMut(Link) -> Result<T, ControllerError>,
) -> Result<T, ControllerError> {
    let first = Instant::now();
    let mut wait = BUSY_FIRST_WAIT;
    let mut tries = 0u32;
    loop {
        tries += 1;
        match attempt(connect(addr)?) {
            Err(e) if is_busy(&e) => {
                if first.elapsed() + wait > BUSY_RETRY_FOR {
                    return Err(ControllerError::Busy {
                        addr,
                        tries,
                        secs: first.elapsed().as_secs_f64(),
                    });
                }
                tracing::info!(
                    "the agent at {addr} is busy; trying again in {:.1} s (for up to {:.0} s in all)",
                    wait.as_secs_f64(),
                    BUSY_RETRY_FOR.as_secs_f64()
                );
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
