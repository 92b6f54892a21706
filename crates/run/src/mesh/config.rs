//! What an operator sets for the mesh (`serve --mesh`'s flags, durations as `Duration`),
//! and the policy the mesh derives from it: how a probe is judged, how much its reflector
//! answers, how often the list is read.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use sonde_proto::mesh::ProberConfig;
use sonde_proto::stamp::tlv::BOOT_ID_BYTES;
use sonde_proto::stamp::DscpPolicy;
use sonde_proto::Key;
use sonde_results::mesh::Judging;

use sonde_results::marks::{Dscp, Ecn, Marks};

use super::peers::{PeersError, Source};
use super::reflector::Rate;

/// A lost probe waits this many timeouts for a later answer whose count tells which way
/// it was lost (the peer's reflector numbers what it reflects).
pub const SETTLE_TIMEOUTS: u32 = 5;
/// Answers per second to one source: this many times this agent's probe rate (a peer
/// probes at its own rate, one DaemonSet's: this one's), at least this many.
pub const ANSWERS_PER_RATE: f64 = 10.0;
/// The list is read again at most this often, whatever `refresh` says.
pub const MIN_REFRESH: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct MeshConfig {
    pub source: Source,
    /// This agent's reflector port, and its peers' where the list does not say.
    pub port: u16,
    /// The address both sockets bind (the agent's `--bind`).
    pub bind: IpAddr,
    /// This agent's `source` label: the address its peers know it by.
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Probes per second per peer (`--mesh-rate`).
    pub rate: f64,
    /// Probes per second at most, all peers together (`--mesh-budget`).
    pub budget: f64,
    /// How often the list is read again (`--mesh-refresh`).
    pub refresh: Duration,
    /// A probe unanswered this long is lost (`--mesh-timeout`).
    pub timeout: Duration,
    /// The window of each peer's histogram (`--mesh-window`).
    pub window: Duration,
    /// The reflector's answers per second at most, all sources together
    /// (`--mesh-reflect-max`).
    pub reflect_max: f64,
    /// The fleet key: probes and answers carry its HMAC; none (`--insecure-no-key`):
    /// unauthenticated.
    pub key: Option<Key>,
    /// The TOS byte this agent's probes leave with (`--mesh-dscp`, `--mesh-ecn`); none:
    /// unmarked, and no Class of Service TLV.
    pub tos: Option<u8>,
    /// `--mesh-follow-up`: each probe asks its peer's reflector for its last answer's
    /// real departure, and answers are booked one answer later, T3 by that stamp.
    pub follow_up: bool,
}

impl MeshConfig {
    /// How each peer's probes are judged: lost after `timeout`; a lost one whose way no
    /// later answer tells is lost either way [`SETTLE_TIMEOUTS`] timeouts after that.
    pub fn judging(&self) -> Judging {
        Judging {
            timeout_ns: nanos(self.timeout),
            window_ns: nanos(self.window),
            resolve_after_ns: nanos(self.timeout * SETTLE_TIMEOUTS),
            ..Judging::default()
        }
    }

    /// The reflector's rate: `reflect_max` a second (a second's worth in a burst), and
    /// [`ANSWERS_PER_RATE`] times the probe rate to one source, room for a peer's bursts
    /// and all a replayed probe can reach a spoofed address with.
    pub fn reflect(&self) -> Rate {
        Rate {
            per_s: self.reflect_max,
            burst: self.reflect_max.max(1.0),
            per_source: ((self.rate * ANSWERS_PER_RATE).ceil() as u32).max(ANSWERS_PER_RATE as u32),
        }
    }

    /// The prober's machine for this configuration: its session `ssid`, `seed` for
    /// where each new peer's first probe falls, this host's `boot_id`.
    pub fn prober(
        &self,
        ssid: u16,
        seed: u64,
        boot_id: Option<[u8; BOOT_ID_BYTES]>,
    ) -> ProberConfig {
        ProberConfig {
            rate_per_s: self.rate,
            budget_per_s: self.budget,
            judging: self.judging(),
            key: self.key.as_ref().map(sonde_proto::mesh::stamp_key),
            ssid,
            boot_id,
            seed,
            tos: self.tos,
            follow_up: self.follow_up,
        }
    }

    /// The DSCPs this agent's reflector answers with at a probe's asking, besides the one
    /// the probe arrived with and CS0: its own probes' class (a peer of the same mesh asks
    /// for it, and a path that bleaches it on the way here should not hide what the way
    /// back does), no other.
    pub fn dscp_policy(&self) -> DscpPolicy {
        DscpPolicy::allowing(self.tos.map(|t| t >> 2).filter(|&d| d != 0))
    }

    /// How often the list is read again: `refresh`, at least [`MIN_REFRESH`].
    pub fn refresh_every(&self) -> Duration {
        self.refresh.max(MIN_REFRESH)
    }
}

/// `serve --mesh`'s own flags, as typed values.
pub struct MeshFlags {
    /// `--mesh SOURCE`: a file of peers or `dns:NAME`.
    pub source: String,
    pub port: u16,
    /// `--mesh-name` [default: `--bind`].
    pub name: Option<String>,
    pub rate: f64,
    pub budget: f64,
    pub refresh: Duration,
    pub timeout: Duration,
    pub window: Duration,
    pub reflect_max: f64,
    pub dscp: Option<Dscp>,
    pub ecn: Option<Ecn>,
    /// `--mesh-follow-up`.
    pub follow_up: bool,
}

/// What of `serve`'s own flags the mesh takes: its address, its key (or
/// `--insecure-no-key`), its labels and `--allow-dscp`'s mask.
pub struct MeshAgent {
    pub bind: IpAddr,
    pub insecure_no_key: bool,
    pub key: Option<Key>,
    pub labels: BTreeMap<String, String>,
    pub allowed_dscps: u64,
}

/// A mesh its flags cannot make, naming the flag.
#[derive(Debug, thiserror::Error)]
pub enum MeshFlagError {
    #[error("--mesh-dscp {0}: this agent does not send that class (network control, CS6 and CS7, unless `sonde serve --allow-dscp` lists it)")]
    Dscp(String),
    #[error(transparent)]
    Source(#[from] PeersError),
    #[error("--mesh needs --key-file (its probes and answers carry the fleet key's HMAC), or --insecure-no-key on an isolated network")]
    NoKey,
}

impl MeshFlags {
    /// The mesh these flags describe on `agent`.
    pub fn config(&self, agent: MeshAgent) -> Result<MeshConfig, MeshFlagError> {
        if let Some(d) = self
            .dscp
            .filter(|d| agent.allowed_dscps >> d.value() & 1 == 0)
        {
            return Err(MeshFlagError::Dscp(d.words()));
        }
        let marks = Marks {
            dscp: self.dscp,
            ecn: self.ecn,
            control_dscp: None,
        };
        let source = Source::parse(&self.source, self.port)?;
        if agent.key.is_none() && !agent.insecure_no_key {
            return Err(MeshFlagError::NoKey);
        }
        let bind = agent.bind;
        Ok(MeshConfig {
            source,
            port: self.port,
            bind,
            name: self.name.clone().unwrap_or_else(|| bind.to_string()),
            labels: agent.labels,
            rate: self.rate,
            budget: self.budget,
            refresh: self.refresh,
            timeout: self.timeout,
            window: self.window,
            reflect_max: self.reflect_max,
            key: agent.key,
            tos: marks.data_tos(),
            follow_up: self.follow_up,
        })
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(rate: f64, timeout: Duration, refresh: Duration) -> MeshConfig {
        MeshConfig {
            source: Source::parse("dns:mesh.example", 862).unwrap(),
            port: 862,
            bind: "198.18.0.1".parse().unwrap(),
            name: "198.18.0.1".into(),
            labels: BTreeMap::new(),
            rate,
            budget: 100.0,
            refresh,
            timeout,
            window: Duration::from_secs(60),
            reflect_max: 10_000.0,
            key: None,
            tos: None,
            follow_up: false,
        }
    }

    #[test]
    fn a_probe_is_judged_by_the_timeout_and_settled_after_five_of_them() {
        let c = config(1.0, Duration::from_millis(1500), Duration::from_secs(30));
        let j = c.judging();
        assert_eq!(j.timeout_ns, 1_500_000_000);
        assert_eq!(j.resolve_after_ns, 7_500_000_000);
        assert_eq!(j.window_ns, 60_000_000_000);
        assert_eq!(j.max_flights, Judging::default().max_flights);
    }

    #[test]
    fn a_source_gets_ten_times_the_probe_rate_and_never_fewer_than_ten() {
        let fast = config(2.5, Duration::from_secs(2), Duration::from_secs(30)).reflect();
        assert_eq!(
            (fast.per_source, fast.per_s, fast.burst),
            (25, 10_000.0, 10_000.0)
        );
        let slow = config(0.1, Duration::from_secs(2), Duration::from_secs(30)).reflect();
        assert_eq!(slow.per_source, 10);
    }

    /// Unmarked, the reflector grants only the arrived class and CS0; marked EF, EF too
    /// (the mesh's class), never network control.
    #[test]
    fn the_reflector_grants_its_own_mesh_class_and_no_other() {
        let mut c = config(1.0, Duration::from_secs(2), Duration::from_secs(30));
        assert_eq!(c.dscp_policy(), DscpPolicy::default());
        c.tos = Some(46 << 2 | 1);
        let p = c.dscp_policy();
        assert!(p.allows(46, 0) && !p.allows(48, 0) && !p.allows(56, 0) && !p.allows(34, 0));
    }

    #[test]
    fn the_list_is_read_at_most_once_a_second() {
        let c = config(1.0, Duration::from_secs(2), Duration::from_millis(200));
        assert_eq!(c.refresh_every(), Duration::from_secs(1));
        let c = config(1.0, Duration::from_secs(2), Duration::from_secs(30));
        assert_eq!(c.refresh_every(), Duration::from_secs(30));
    }

    #[test]
    fn flags_refuse_network_control_unless_allowed_and_a_mesh_without_a_key() {
        let flags = |dscp: Option<u8>| MeshFlags {
            source: "dns:agents".into(),
            port: 8620,
            name: None,
            rate: 1.0,
            budget: 100.0,
            refresh: Duration::from_secs(30),
            timeout: Duration::from_secs(2),
            window: Duration::from_secs(60),
            reflect_max: 10_000.0,
            dscp: dscp.map(|d| Dscp::new(d).unwrap()),
            ecn: None,
            follow_up: false,
        };
        let agent = |allowed_dscps, insecure_no_key| MeshAgent {
            bind: "198.18.0.1".parse().unwrap(),
            insecure_no_key,
            key: None,
            labels: BTreeMap::new(),
            allowed_dscps,
        };
        let default = crate::agent::DEFAULT_TEST_DSCPS;
        let c = flags(Some(46)).config(agent(default, true)).unwrap();
        assert_eq!((c.tos, c.name.as_str()), (Some(46 << 2), "198.18.0.1"));
        let e = flags(Some(48)).config(agent(default, true)).unwrap_err();
        assert!(matches!(e, MeshFlagError::Dscp(_)) && e.to_string().contains("--allow-dscp"));
        assert!(flags(Some(48)).config(agent(u64::MAX, true)).is_ok());
        let e = flags(None).config(agent(default, false)).unwrap_err();
        assert!(matches!(e, MeshFlagError::NoKey), "{e}");
    }
}
