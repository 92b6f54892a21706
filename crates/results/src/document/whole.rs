//! The document itself: `start` (the spec, both hosts, who ran it), the intervals and the
//! end, assembled once from both sides' results by the kind's row ([`Document::build`]),
//! or from a run no agent took part in ([`Document::local`]), and read back through the
//! kind's row as well.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{parts, row, ClientAgent, End, FleetPair, Inputs, IntervalFigures};
use crate::side::HostInfo;
use crate::spec::{TestName, TestSpec};
use crate::verdict::LimitedBy;

/// Bumped on any change a parser of the document could notice.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Wire")]
pub struct Document {
    pub schema_version: u32,
    pub test: TestName,
    pub start: Start,
    pub intervals: Vec<IntervalFigures>,
    pub end: End,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Start {
    pub spec: TestSpec,
    /// The controller's exact command line.
    pub command: String,
    /// The agent's exact command line, as it reported it.
    pub server_command: Option<String>,
    pub client: HostInfo,
    pub server: Option<HostInfo>,
    /// Address of the agent as the controller reached it.
    pub server_address: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub software: String,
    /// When the controller built the document, RFC 3339, UTC (what `sonde fleet` checks
    /// hosts' overlap by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// A test between two agents: the agent that ran the client side (the controller's
    /// host sent no test traffic; `command` is the controller's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_agent: Option<ClientAgent>,
    /// A test run by `sonde fleet`: which pair of which fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetPair>,
    /// The serving agent's own labels (`sonde serve --label`), as it announced them to
    /// the controller, cut to the rules.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub server_labels: BTreeMap<String, String>,
}

/// What the controller records of a document an agent sent back ([`Document::relayed`]).
pub struct Relayed {
    pub client_agent: ClientAgent,
    /// A fleet's run: its pair, with the file's labels.
    pub fleet: Option<FleetPair>,
    /// RFC 3339, UTC: when the controller had the document.
    pub finished_at: String,
}

/// What [`Document::local`] starts from.
pub struct LocalStart {
    pub spec: TestSpec,
    pub command: String,
    pub host: HostInfo,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub software: String,
}

impl Document {
    /// The document of a test no agent took part in (a watch; a fake in the run layer's
    /// tests): its spec, command line, host and start, its intervals and end.
    pub fn local(start: LocalStart, intervals: Vec<IntervalFigures>, end: End) -> Document {
        Document {
            schema_version: SCHEMA_VERSION,
            test: start.spec.test_name(),
            start: Start {
                spec: start.spec,
                command: start.command,
                server_command: None,
                client: start.host,
                server: None,
                server_address: String::new(),
                started_at: start.started_at,
                software: start.software,
                finished_at: None,
                client_agent: None,
                fleet: None,
                server_labels: BTreeMap::new(),
            },
            intervals,
            end,
        }
    }

    /// The document an agent ran alone and sent back (a STAMP run `--from` it), assembled
    /// with what only the controller knows: the agent as it reached it, the fleet's pair
    /// (with the agent's own labels under the file's; a reflector has none) and when the
    /// run ended. Whatever the agent wrote of these itself is not kept.
    pub fn relayed(sent: Document, record: Relayed) -> Document {
        let Document {
            schema_version,
            test,
            start,
            intervals,
            end,
        } = sent;
        let fleet = record.fleet.map(|pair| {
            pair.with_agents_labels(Some(&record.client_agent.labels), &BTreeMap::new())
        });
        Document {
            schema_version,
            test,
            start: Start {
                client_agent: Some(record.client_agent),
                fleet,
                finished_at: Some(record.finished_at),
                ..start
            },
            intervals,
            end,
        }
    }

    /// The document of `inp`, assembled once; `judge` gives the verdict of what limited
    /// the run from the assembled figures (`limit::judge`, which imports this module, so
    /// it is handed in rather than called).
    pub fn assemble(inp: Inputs<'_>, judge: fn(&Document) -> Option<LimitedBy>) -> Document {
        let mut doc = Document::build(inp);
        doc.end.limited_by = judge(&doc);
        doc
    }

    /// The document of `inp`, without a verdict: its intervals and section from its kind's
    /// row (`Row::build`; a load, a watch and a STAMP run are built elsewhere and get an
    /// empty section here).
    pub fn build(inp: Inputs<'_>) -> Document {
        let test = inp.spec.test_name();
        let row = row(test);
        let (intervals, section) = match row.build {
            Some(build) => build(&inp),
            None => (Vec::new(), (row.empty)()),
        };
        let mut end = End::new(parts::is_partial(&inp), inp.error.clone(), section);
        let shared = inp
            .server
            .is_some_and(|s| s.host.boot_id.is_some() && s.host.boot_id == inp.client.host.boot_id);
        if shared {
            let host = &inp.client.host.hostname;
            end.count_one_host(host, inp.client.cpu.clone(), row.take_host_cpu);
        }
        Document {
            schema_version: SCHEMA_VERSION,
            test,
            start: start(inp),
            intervals,
            end,
        }
    }
}

fn start(inp: Inputs<'_>) -> Start {
    let mut start = Start {
        spec: inp.spec.clone(),
        command: inp.command,
        server_command: inp.server_command,
        client: inp.client.host.clone(),
        server: inp.server.map(|s| s.host.clone()),
        server_address: inp.server_address,
        started_at: inp.started_at,
        software: inp.software,
        finished_at: inp.finished_at,
        client_agent: inp.client_agent,
        fleet: None,
        server_labels: inp.server_labels,
    };
    // The agents' own labels, as this run recorded them, under the fleet file's.
    let client_own = start.client_agent.as_ref().map(|a| &a.labels);
    start.fleet = inp
        .fleet
        .map(|pair| pair.with_agents_labels(client_own, &start.server_labels));
    start
}

/// A document as written: `intervals` and `end` are read once `test` says which section
/// they hold (JSON keys may come in any order), by the readers of its kind's row
/// (`End::read`, `IntervalFigures::read`: the rows of `document`).
#[derive(Deserialize)]
struct Wire {
    schema_version: u32,
    test: TestName,
    start: Start,
    intervals: Vec<serde_json::Value>,
    end: serde_json::Value,
}

impl TryFrom<Wire> for Document {
    type Error = serde_json::Error;

    fn try_from(w: Wire) -> Result<Document, serde_json::Error> {
        Ok(Document {
            schema_version: w.schema_version,
            test: w.test,
            start: w.start,
            intervals: w
                .intervals
                .into_iter()
                .map(|i| IntervalFigures::read(w.test, i))
                .collect::<Result<_, _>>()?,
            end: End::read(w.test, w.end)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::Section;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The agent's claims of where its run belongs are replaced by the controller's record;
    /// its figures are kept as sent.
    #[test]
    fn a_relayed_document_takes_the_controllers_record_not_the_agents() {
        let mut sent = Document::local(
            LocalStart {
                spec: TestSpec::Stream(Default::default()),
                command: "sonde serve".into(),
                host: HostInfo::default(),
                started_at: "2026-11-28T12:00:00Z".into(),
                software: String::new(),
            },
            vec![],
            End::new(true, Some("cut".into()), Section::empty(TestName::Stream)),
        );
        // A rogue agent's own record of itself.
        sent.start.client_agent = Some(ClientAgent {
            address: "198.18.0.66:1".into(),
            command: None,
            labels: map(&[("zone", "rogue")]),
        });
        sent.start.fleet = Some(FleetPair {
            source_labels: map(&[("zone", "rogue")]),
            ..Default::default()
        });
        sent.start.finished_at = Some("1999-01-01T00:00:00Z".into());
        let agent = ClientAgent {
            address: "198.18.0.1:5301".into(),
            command: Some("sonde serve --label zone=a".into()),
            labels: map(&[("zone", "a"), ("node", "n1")]),
        };
        let pair = FleetPair {
            source_labels: map(&[("zone", "file")]),
            ..Default::default()
        };
        let doc = Document::relayed(
            sent.clone(),
            Relayed {
                client_agent: agent.clone(),
                fleet: Some(pair),
                finished_at: "2026-11-28T12:00:05Z".into(),
            },
        );
        assert_eq!(doc.start.client_agent, Some(agent));
        assert_eq!(
            doc.start.fleet.as_ref().map(|f| f.source_labels.clone()),
            Some(map(&[("zone", "file"), ("node", "n1")]))
        );
        assert_eq!(
            doc.start.finished_at.as_deref(),
            Some("2026-11-28T12:00:05Z")
        );
        assert_eq!((&doc.end, &doc.intervals), (&sent.end, &sent.intervals));
        assert_eq!(doc.start.command, "sonde serve");
        // Not a fleet's run: no pair, whatever the agent wrote.
        let alone = Document::relayed(
            sent,
            Relayed {
                client_agent: ClientAgent {
                    address: "198.18.0.1:5301".into(),
                    command: None,
                    labels: BTreeMap::new(),
                },
                fleet: None,
                finished_at: String::new(),
            },
        );
        assert_eq!(alone.start.fleet, None);
    }

    #[test]
    fn a_fleet_pair_takes_each_agents_labels_under_the_files() {
        let pair = FleetPair {
            source_labels: map(&[("zone", "file-a")]),
            destination_labels: map(&[("rack", "r9")]),
            ..Default::default()
        };
        let mut start = Document::local(
            LocalStart {
                spec: TestSpec::Stream(Default::default()),
                command: String::new(),
                host: HostInfo::default(),
                started_at: String::new(),
                software: String::new(),
            },
            vec![],
            End::new(false, None, Section::empty(TestName::Stream)),
        )
        .start;
        start.server_labels = map(&[("zone", "agent-b"), ("rack", "agent-rack")]);
        start.client_agent = Some(ClientAgent {
            address: "198.18.0.1:5301".into(),
            command: None,
            labels: map(&[("zone", "agent-a"), ("node", "n1")]),
        });
        let merged = pair.with_agents_labels(
            start.client_agent.as_ref().map(|a| &a.labels),
            &start.server_labels,
        );
        assert_eq!(
            merged.source_labels,
            map(&[("zone", "file-a"), ("node", "n1")])
        );
        assert_eq!(
            merged.destination_labels,
            map(&[("zone", "agent-b"), ("rack", "r9")])
        );
        // A test the controller is an end of has no client agent: the file's labels only.
        start.client_agent = None;
        assert_eq!(
            pair.with_agents_labels(
                start.client_agent.as_ref().map(|a| &a.labels),
                &start.server_labels
            )
            .source_labels,
            pair.source_labels
        );
    }
}
