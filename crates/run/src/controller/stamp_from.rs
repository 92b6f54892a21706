//! A STAMP run sent by an agent (`sonde stamp ROUTER --from AGENT`; a fleet's pair toward
//! an agent-less endpoint): the controller resolves the reflector, asks the agent
//! (`Stamp`), and keeps the document it sends back, recorded as the agent's run with the
//! fleet's pair and the agent's own labels. The controller's host sends no test packet.

use std::net::SocketAddr;
use std::time::Instant;

use sonde_proto::{ClientEvent, ClientSession, Key, Labels, Session, Timeouts};
use sonde_results::document::{ClientAgent, FleetPair, Relayed};
use sonde_results::{Document, StampSpec, TestSpec};

use super::{now_rfc3339, resolve, ControllerError, SOFTWARE};
use crate::control::Link;
use crate::signals::Interrupt;

/// The agent that sends, and how the run is recorded.
pub struct StampFrom<'a> {
    /// The agent, as given (`--from`, a fleet's address).
    pub agent: &'a str,
    /// Its control port.
    pub port: u16,
    pub key: Option<&'a Key>,
    /// The exact command line, for the record.
    pub command: &'a str,
    /// A fleet's run: its pair (the agent its source, the reflector its destination).
    pub fleet: Option<&'a FleetPair>,
}

/// Runs `spec` from `from.agent` toward `spec`'s reflector; the agent's document.
pub fn run_from(
    spec: &StampSpec,
    from: &StampFrom<'_>,
    interrupt: &Interrupt,
) -> Result<Document, ControllerError> {
    let reflector = resolve(&spec.host, spec.port)?;
    let agent = resolve(from.agent, from.port)?;
    let session = || {
        ClientSession::new(
            TestSpec::Stamp(spec.clone()),
            SOFTWARE,
            from.command,
            Timeouts::default(),
            Instant::now(),
        )
        .with_nonce(crate::random::nonce())
        .with_key(from.key.cloned())
        .dialling(agent.ip())
        .with_ticket_at(super::unix_ms())
        .with_stamp_reflector(reflector)
    };
    let (sent, command, labels) = super::busy::until_served(agent, interrupt, |mut link| {
        exchange(&mut link, &mut session(), agent, interrupt)
    })?;
    // What an agent says of itself is its own; where the run belongs is ours.
    let record = Relayed {
        client_agent: ClientAgent {
            address: agent.to_string(),
            command,
            labels,
        },
        fleet: from.fleet.cloned(),
        finished_at: now_rfc3339(),
    };
    Ok(Document::relayed(sent, record))
}

/// Hello to `StampDone`: the document, the agent's command line and its own labels.
fn exchange(
    link: &mut Link,
    session: &mut ClientSession,
    addr: SocketAddr,
    interrupt: &Interrupt,
) -> Result<(Document, Option<String>, Labels), ControllerError> {
    let (mut command, mut labels) = (None, Labels::new());
    loop {
        super::running::turn(link, session, addr, interrupt)?;
        while let Some(ev) = session.poll_event() {
            match ev {
                ClientEvent::Welcome {
                    command: c,
                    labels: l,
                    ..
                } => (command, labels) = (Some(c), l),
                ClientEvent::Stamp(doc) => return Ok((*doc, command, labels)),
                _ => {}
            }
        }
    }
}
