//! The messages of the control protocol and its constants.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sonde_results::{Document, IntervalSample, SideResult, StampSpec, TestSpec};

use crate::error::PeerError;
use crate::grant::Grant;

/// First field of every `Hello`: tells a sonde peer from anything else on the port.
pub const MAGIC: &str = "netsonde";
/// Bumped on any incompatible change of messages or states.
/// 2: mutual authentication, sealed frames after it, capabilities only after it, grants.
/// 3: the proofs name the agent the controller dialled (`Hello`'s `agent`); a client part
/// sends only once the serving agent answered its challenge on the data port (`target`);
/// results and interval samples carry each kind's typed section.
/// Still 3 with `Stamp`/`StampDone`: a controller sends `Stamp` only to an agent that
/// announces [`STAMP_SENDER`], so an older agent never reads one. Still 3 with `Hello`'s
/// `ticket` (issue 52): an older agent ignores the field (serde skips unknown fields), and
/// an agent places a `Hello` without one as before, so either side may be the older.
pub const PROTOCOL_VERSION: u32 = 3;

// A message is built, sent and dropped once per step of a test, never stored in bulk:
// `Setup`'s inline spec costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// Controller → agent, first message: a version banner and the controller's nonce.
    Hello {
        magic: String,
        version: u32,
        software: String,
        /// Hex of the controller's fresh random bytes (its half of the handshake).
        #[serde(default)]
        nonce: String,
        /// The agent's address as the controller dialled it: the agent checks it is its
        /// own, and both proofs are bound to it.
        #[serde(default)]
        agent: String,
        /// The controller's proof of the key at accept, over `nonce`, `agent` and its
        /// time ([`crate::ticket`]): places kept for key holders, never for strangers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ticket: Option<crate::ticket::Ticket>,
    },
    /// Agent → controller, the answer to `Hello`: a version banner only; what the agent
    /// is and runs comes in `Accepted`, after the key is proven.
    Welcome {
        magic: String,
        version: u32,
        software: String,
        /// Present when the agent requires a key: hex of the agent's nonce.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        challenge: Option<String>,
        /// With `challenge`: the agent's proof of the key over both nonces, hex.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proof: Option<String>,
    },
    /// Controller → agent: its proof of the key over both nonces, hex. Every frame after it,
    /// each way, is sealed.
    Auth {
        mac: String,
    },
    /// Agent → controller: the controller is accepted; what this agent runs.
    Accepted {
        /// The agent's command line, for the record.
        command: String,
        /// Test types and engines the agent runs, and "third-party" if it takes parts of
        /// tests between two agents.
        capabilities: Vec<String>,
        /// The agent's own labels (`sonde serve --label`), stored with each run. Here and
        /// not in `Welcome`: `Welcome` goes to anyone who connects, before a key is proven,
        /// and what the agent is (its zone, node, address) is for accepted controllers
        /// only. Absent from older agents, and left out when empty so older controllers
        /// read it.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        labels: BTreeMap<String, String>,
    },
    Setup {
        spec: TestSpec,
        /// Present in a test between two agents (`--from A --to B`): this agent's part.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        third_party: Option<ThirdParty>,
        /// The controller's command line, for the agent's log.
        #[serde(default)]
        command: String,
    },
    /// The agent listens for data connections; each starts with `cookie`.
    Ready {
        data_port: u16,
        cookie: u64,
        /// Serving part of a test between two agents: the grant the client agent needs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grant: Option<Grant>,
    },
    /// Controller → agent: data connections are open; the clock starts now.
    Start,
    /// Agent → controller, once per interval of the measured window.
    Interval {
        sample: IntervalSample,
    },
    /// Client-role agent → controller: its schedule has run out and every worker ended
    /// (what the controller waits for before it says `Stop` to the serving agent).
    Drained,
    /// Controller → agent: the controller's part is over; send your results.
    Stop,
    Results {
        side: Box<SideResult>,
    },
    Error {
        error: PeerError,
    },
    /// Controller → agent, instead of `Setup`: send STAMP test packets to `reflector`, an
    /// agent-less reflector (a router's), and answer with the run's document. The address
    /// is resolved by the controller; the agent sends only within its own
    /// `--stamp-targets`.
    Stamp {
        spec: StampSpec,
        reflector: SocketAddr,
        /// The controller's command line, for the agent's log and the document.
        #[serde(default)]
        command: String,
    },
    /// Agent → controller: the STAMP run's document, as `sonde stamp` on its host makes it.
    StampDone {
        document: Box<Document>,
    },
}

impl Message {
    pub fn name(&self) -> &'static str {
        match self {
            Message::Hello { .. } => "Hello",
            Message::Welcome { .. } => "Welcome",
            Message::Auth { .. } => "Auth",
            Message::Accepted { .. } => "Accepted",
            Message::Setup { .. } => "Setup",
            Message::Ready { .. } => "Ready",
            Message::Start => "Start",
            Message::Interval { .. } => "Interval",
            Message::Drained => "Drained",
            Message::Stop => "Stop",
            Message::Results { .. } => "Results",
            Message::Error { .. } => "Error",
            Message::Stamp { .. } => "Stamp",
            Message::StampDone { .. } => "StampDone",
        }
    }
}

/// The capability an agent announces when it can take either part of a test between two
/// agents; a controller asks for a third-party test only from agents that announce it.
pub const THIRD_PARTY: &str = "third-party";

/// The capability of an agent that sends STAMP to an agent-less reflector when a controller
/// asks (`Stamp`), within its `--stamp-targets`; a controller sends `Stamp` only to agents
/// that announce it.
pub const STAMP_SENDER: &str = "stamp-sender";

/// The capability of a [`STAMP_SENDER`] agent that holds its operator's key for the
/// reflectors (`--stamp-sender-key-file`): only it runs authenticated STAMP, since the
/// controller's key never crosses the control connection.
pub const STAMP_SENDER_KEY: &str = "stamp-sender-key";

/// An agent's part in a test the controller is not an end of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "part", rename_all = "snake_case")]
pub enum ThirdParty {
    /// Run the client side against the serving agent's data port (`Ready` of that agent),
    /// once its grant checks out.
    Client {
        server: SocketAddr,
        cookie: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grant: Option<Grant>,
    },
    /// Serve a client at `client` (another agent), not the controller: data connections
    /// come from there.
    Server { client: IpAddr },
}

/// How long each side waits for the next step before giving up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From an agent's accept to the controller's `Hello`: short, so that idle connections
    /// hold nothing for long.
    pub hello: Duration,
    /// From connect to `Welcome`, and from `Welcome` to `Setup`.
    pub handshake: Duration,
    /// From `Setup` to `Ready`, and from `Ready` to `Start`.
    pub setup: Duration,
    /// Longest silence of the agent during a test beyond one interval.
    pub liveness: Duration,
    /// From `Stop` to `Results`.
    pub results: Duration,
    /// After the window: how long receivers may take to see every connection end.
    pub drain: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            hello: Duration::from_secs(2),
            handshake: Duration::from_secs(5),
            setup: Duration::from_secs(10),
            liveness: Duration::from_millis(100),
            results: Duration::from_secs(15),
            drain: Duration::from_secs(3),
        }
    }
}
