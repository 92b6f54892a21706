//! A fleet file: its agents (by address, or every address of one DNS name), their
//! labels, the topology, and `[[test]]` tables as in suite files.
//!
//! ```toml
//! name = "zones"              # labels the fleet's runs in the store
//! topology = "mesh"           # mesh (default) | star (with center) | pairs (with pairs)
//! port = 5301
//! key_file = "/etc/sonde/key"
//! [[agent]]
//! name = "a1"                 # default: the address
//! address = "198.18.1.1"
//! labels = { zone = "1", node = "n1" }
//! [[agent]]
//! dns = "sonde-agent.netsonde.svc.cluster.local"  # every address it resolves to
//! labels = { network = "pod" }
//! [[stamp_target]]            # an agent-less STAMP reflector (a router's)
//! name = "r1"                 # default: the address
//! address = "198.18.9.1:862"  # HOST[:PORT], port 862 by default
//! labels = { site = "edge" }
//! from = ["a1"]               # the agents that measure toward it (default: every one)
//! [[test]]
//! type = "stream"
//! duration = 5
//! [[test]]
//! type = "stamp"              # runs from each agent toward each stamp_target
//! rate = 50
//! ```
//!
//! A `stamp` test runs from an agent (`sonde stamp ROUTER --from AGENT`): the agent
//! sends only within its own `--stamp-targets`, unauthenticated (no STAMP key crosses the
//! control connection); every other test runs between two agents.

use std::collections::BTreeMap;
use std::io;
use std::net::IpAddr;
use std::path::Path;

use super::schedule::Topology;
use crate::matrix::{scalar, Build, FileError, TestCase, TomlFile};

#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    pub name: String,
    pub address: String,
    pub labels: BTreeMap<String, String>,
}

/// An agent-less STAMP reflector of the fleet, and the agents that measure toward it.
#[derive(Debug, Clone, PartialEq)]
pub struct StampTarget {
    /// Its name, `HOST[:PORT]` as `address`, and labels, as an agent's.
    pub end: Agent,
    /// Indexes of the agents that send to it.
    pub from: Vec<usize>,
}

pub struct Fleet {
    pub name: String,
    pub agents: Vec<Agent>,
    pub topology: Topology,
    /// Tests between two agents.
    pub cases: Vec<TestCase>,
    /// Agent-less STAMP reflectors (`[[stamp_target]]`).
    pub stamp_targets: Vec<StampTarget>,
    /// `type = "stamp"` tests: from an agent toward each STAMP target.
    pub stamp_cases: Vec<TestCase>,
    pub repetitions: usize,
    /// Flags every test gets (`--port`, `--key-file`).
    pub common: Vec<String>,
}

/// Every address `name` resolves to (a headless Service's pods), sorted.
pub type Resolve<'a> = &'a dyn Fn(&str) -> io::Result<Vec<IpAddr>>;

/// The system resolver's addresses for `name`, each once, sorted (stable keys for
/// `--resume`).
pub fn system_resolve(name: &str) -> io::Result<Vec<IpAddr>> {
    use std::net::ToSocketAddrs;
    let mut ips: Vec<IpAddr> = (name, 0).to_socket_addrs()?.map(|a| a.ip()).collect();
    ips.sort();
    ips.dedup();
    Ok(ips)
}

/// Reads a fleet file; every test case must build (`build`) between its first two agents.
pub fn load<T>(
    path: &Path,
    resolve: Resolve<'_>,
    build: &Build<'_, T>,
) -> Result<Fleet, FileError> {
    let f = TomlFile::read(path)?;
    let name = f.name("name", "name the fleet (its runs' label)")?;
    let agents = agents(&f, resolve)?;
    let topology = topology(&f, &agents)?;
    let stamp_targets = stamp_targets(&f, &agents)?;
    let common = f.common_flags(&["port", "key_file"]);
    let between = ["--from", &agents[0].address, "--to", &agents[1].address].map(String::from);
    let router = stamp_targets.first().map(|t| t.end.address.clone());
    let target = |kind: &str| match (kind, &router) {
        ("stamp", Some(r)) => vec![r.clone(), "--from".into(), agents[0].address.clone()],
        _ => between.to_vec(),
    };
    let (stamp_cases, cases): (Vec<_>, Vec<_>) = f
        .tests_toward(&target, &common, build)?
        .into_iter()
        .partition(|c| c.kind == "stamp");
    match (stamp_targets.is_empty(), stamp_cases.is_empty()) {
        (true, false) => {
            return Err(f.err(
                "type",
                "a stamp test runs toward a [[stamp_target]]: the file lists none",
            ))
        }
        (false, true) => {
            return Err(f.err(
                "stamp_target",
                "no [[test]] of type = \"stamp\" runs toward it",
            ))
        }
        _ => {}
    }
    Ok(Fleet {
        name,
        repetitions: f.repetitions()?,
        agents,
        topology,
        cases,
        stamp_targets,
        stamp_cases,
        common,
    })
}

impl Fleet {
    /// End `i` of a pair: an agent, or past them a STAMP target.
    pub fn end(&self, i: usize) -> &Agent {
        match self.agents.get(i) {
            Some(a) => a,
            None => &self.stamp_targets[i - self.agents.len()].end,
        }
    }

    /// The test cases of a pair toward end `to`.
    pub fn cases_toward(&self, to: usize) -> &[TestCase] {
        match to < self.agents.len() {
            true => &self.cases,
            false => &self.stamp_cases,
        }
    }

    /// The (agent, STAMP target) pairs, each target as end `agents + t`.
    pub fn stamp_pairs(&self) -> Vec<(usize, usize)> {
        let n = self.agents.len();
        let each = self.stamp_targets.iter().enumerate();
        each.flat_map(|(t, st)| st.from.iter().map(move |&a| (a, n + t)))
            .collect()
    }
}

/// The `[[stamp_target]]` tables: name (default the address), address, labels, and the
/// agents (`from`, by name or address; default every one) that measure toward each.
fn stamp_targets(f: &TomlFile, agents: &[Agent]) -> Result<Vec<StampTarget>, FileError> {
    let list = match f.doc.get("stamp_target") {
        None => return Ok(Vec::new()),
        Some(toml::Value::Array(list)) => list,
        Some(_) => return Err(f.err("stamp_target", "must be [[stamp_target]] tables")),
    };
    let mut out: Vec<StampTarget> = Vec::new();
    for t in list {
        let t = t
            .as_table()
            .ok_or_else(|| f.err("stamp_target", "each [[stamp_target]] must be a table"))?;
        let text = |key| t.get(key).and_then(|v: &toml::Value| v.as_str());
        let address = text("address").ok_or_else(|| {
            f.err(
                "stamp_target",
                "each [[stamp_target]] needs address = \"HOST[:PORT]\"",
            )
        })?;
        let name = text("name").unwrap_or(address).to_string();
        let taken = agents
            .iter()
            .map(|a| &a.name)
            .chain(out.iter().map(|s| &s.end.name));
        if taken.into_iter().any(|n| *n == name) {
            return Err(f.err("name", format!("'{name}' is listed twice")));
        }
        let from = match t.get("from") {
            None => (0..agents.len()).collect(),
            Some(v) => from_agents(f, v, agents)?,
        };
        let end = Agent {
            name,
            address: address.to_string(),
            labels: labels(f, t.get("labels"))?,
        };
        out.push(StampTarget { end, from });
    }
    Ok(out)
}

/// `from = ["AGENT", ...]`: agent indexes.
fn from_agents(f: &TomlFile, v: &toml::Value, agents: &[Agent]) -> Result<Vec<usize>, FileError> {
    let bad = || {
        f.err(
            "from",
            "must be a list of the [[agent]]s' names: [\"a1\", \"a2\"]",
        )
    };
    let list = v.as_array().filter(|l| !l.is_empty()).ok_or_else(bad)?;
    list.iter()
        .map(|n| {
            let n = n.as_str().ok_or_else(bad)?;
            agents
                .iter()
                .position(|a| a.name == n || a.address == n)
                .ok_or_else(|| f.err("from", format!("'{n}' is not one of the [[agent]]s")))
        })
        .collect()
}

/// A table's `labels = { k = "v" }`.
fn labels(f: &TomlFile, v: Option<&toml::Value>) -> Result<BTreeMap<String, String>, FileError> {
    match v {
        None => Ok(BTreeMap::new()),
        Some(toml::Value::Table(t)) => t
            .iter()
            .map(|(k, v)| scalar(v).map(|v| (k.clone(), v)))
            .collect::<Option<_>>()
            .ok_or_else(|| f.err("labels", "values must be strings or numbers")),
        Some(_) => Err(f.err("labels", "must be a table: { zone = \"a\" }")),
    }
}

fn agents(f: &TomlFile, resolve: Resolve<'_>) -> Result<Vec<Agent>, FileError> {
    let Some(toml::Value::Array(list)) = f.doc.get("agent") else {
        return Err(f.err("agent", "missing: [[agent]] tables with address or dns"));
    };
    let mut agents = Vec::new();
    for a in list {
        let Some(a) = a.as_table() else {
            return Err(f.err("agent", "each [[agent]] must be a table"));
        };
        let labels = labels(f, a.get("labels"))?;
        let text = |key| a.get(key).and_then(|v: &toml::Value| v.as_str());
        match (text("address"), text("dns")) {
            (Some(address), None) => agents.push(Agent {
                name: text("name").unwrap_or(address).to_string(),
                address: address.to_string(),
                labels,
            }),
            (None, Some(dns)) => {
                let ips = resolve(dns).map_err(|e| f.err("dns", format!("{dns}: {e}")))?;
                if ips.is_empty() {
                    return Err(f.err("dns", format!("{dns} resolves to no address")));
                }
                agents.extend(ips.iter().map(|ip| Agent {
                    name: ip.to_string(),
                    address: ip.to_string(),
                    labels: labels.clone(),
                }));
            }
            _ => {
                return Err(f.err(
                    "agent",
                    "each [[agent]] needs one of address = \"HOST\" or dns = \"NAME\"",
                ))
            }
        }
    }
    let mut names: Vec<&str> = agents.iter().map(|a| a.name.as_str()).collect();
    names.sort();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(f.err("name", format!("agent '{}' is listed twice", w[0])));
    }
    if agents.len() < 2 {
        return Err(f.err("agent", "a fleet needs at least two agents"));
    }
    Ok(agents)
}

fn topology(f: &TomlFile, agents: &[Agent]) -> Result<Topology, FileError> {
    let index = |key: &str, name: &str| {
        agents
            .iter()
            .position(|a| a.name == name || a.address == name)
            .ok_or_else(|| f.err(key, format!("'{name}' is not one of the [[agent]]s")))
    };
    match f.doc.get("topology").map(|v| v.as_str()) {
        None | Some(Some("mesh")) => Ok(Topology::Mesh),
        Some(Some("star")) => match f.doc.get("center").and_then(|v| v.as_str()) {
            Some(c) => Ok(Topology::Star(index("center", c)?)),
            None => Err(f.err("center", "a star needs center = \"AGENT\"")),
        },
        Some(Some("pairs")) => {
            let bad = || f.err("pairs", "must be a list of [\"SOURCE\", \"DESTINATION\"]");
            let Some(toml::Value::Array(list)) = f.doc.get("pairs") else {
                return Err(bad());
            };
            let mut pairs = Vec::new();
            for p in list {
                let Some([a, b]) = p.as_array().map(|v| v.as_slice()) else {
                    return Err(bad());
                };
                let (Some(a), Some(b)) = (a.as_str(), b.as_str()) else {
                    return Err(bad());
                };
                let (a, b) = (index("pairs", a)?, index("pairs", b)?);
                if a == b {
                    return Err(f.err("pairs", "a pair needs two different agents"));
                }
                pairs.push((a, b));
            }
            if pairs.is_empty() {
                return Err(bad());
            }
            Ok(Topology::Pairs(pairs))
        }
        _ => Err(f.err("topology", "must be one of mesh, star, pairs")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<Fleet, FileError> {
        let p = std::env::temp_dir().join(format!(
            "sonde-fleet-{}-{}.toml",
            std::process::id(),
            text.len()
        ));
        std::fs::write(&p, text).unwrap();
        let resolve = |name: &str| match name {
            "agents.test" => Ok(vec![
                "198.18.1.2".parse().unwrap(),
                "198.18.1.1".parse().unwrap(),
            ]),
            _ => Err(io::Error::other("no such name")),
        };
        let r = load(&p, &resolve, &crate::matrix::tests::build);
        let _ = std::fs::remove_file(p);
        r
    }

    const TESTS: &str = "[[test]]\ntype = \"stream\"\nduration = 2\n[[test]]\ntype = \"ping\"\n";

    #[test]
    fn agents_by_address_and_by_dns_with_labels() {
        let f = load_text(&format!(
            "name = \"z\"\n[[agent]]\nname = \"a\"\naddress = \"198.18.1.9\"\nlabels = {{ zone = \"1\" }}\n[[agent]]\ndns = \"agents.test\"\nlabels = {{ zone = \"2\" }}\n{TESTS}"
        ))
        .unwrap();
        let names: Vec<_> = f.agents.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["a", "198.18.1.2", "198.18.1.1"]);
        assert_eq!(f.agents[2].labels["zone"], "2");
        assert_eq!(f.topology, Topology::Mesh);
        assert_eq!(f.cases.len(), 2);
    }

    #[test]
    fn stamp_targets_pair_with_their_agents_and_their_errors_name_the_key() {
        let agents = "name = \"z\"\n[[agent]]\nname = \"a\"\naddress = \"198.18.1.1\"\n[[agent]]\nname = \"b\"\naddress = \"198.18.1.2\"\n";
        let stamp = "[[test]]\ntype = \"stamp\"\nrate = 50\n";
        let f = load_text(&format!(
            "{agents}[[stamp_target]]\nname = \"r1\"\naddress = \"198.18.9.1:8620\"\nlabels = {{ site = \"edge\" }}\n[[stamp_target]]\naddress = \"198.18.9.2\"\nfrom = [\"b\"]\n{TESTS}{stamp}"
        ))
        .unwrap();
        assert_eq!((f.cases.len(), f.stamp_cases.len()), (2, 1));
        assert_eq!(f.stamp_cases[0].flags, ["--rate", "50"]);
        // Authenticated mode is a boolean flag (the agent's own key), never key bytes.
        let auth = "[[test]]\ntype = \"stamp\"\nauthenticated = true\n";
        let target = "[[stamp_target]]\naddress = \"198.18.9.1\"\n";
        let authed = load_text(&format!("{agents}{target}{TESTS}{auth}")).unwrap();
        assert_eq!(authed.stamp_cases[0].flags, ["--authenticated"]);
        // Ends past the agents are the targets: r1 from both agents, the second from b.
        assert_eq!(f.stamp_pairs(), vec![(0, 2), (1, 2), (1, 3)]);
        assert_eq!(f.end(2).name, "r1");
        assert_eq!(f.end(2).labels["site"], "edge");
        assert_eq!(f.end(3).name, "198.18.9.2");
        assert!(f.cases_toward(3).iter().all(|c| c.kind == "stamp"));
        assert!(f.cases_toward(1).iter().all(|c| c.kind != "stamp"));
        let target = "[[stamp_target]]\naddress = \"198.18.9.1\"\n";
        for (text, want) in [
            (
                format!("{agents}{target}{TESTS}"),
                "no [[test]] of type = \"stamp\"",
            ),
            (
                format!("{agents}{TESTS}{stamp}"),
                "key 'type': a stamp test runs toward a [[stamp_target]]",
            ),
            (
                format!(
                    "{agents}[[stamp_target]]\nname = \"a\"\naddress = \"198.18.9.1\"\n{stamp}"
                ),
                "'a' is listed twice",
            ),
            (
                format!("{agents}{target}from = [\"c\"]\n{stamp}"),
                "key 'from': 'c' is not one of the [[agent]]s",
            ),
            (
                format!("{agents}[[stamp_target]]\nname = \"r\"\n{stamp}"),
                "needs address",
            ),
        ] {
            let e = format!("{:#}", load_text(&text).err().unwrap());
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn topologies_and_their_errors_name_the_line_and_key() {
        let agents = "name = \"z\"\n[[agent]]\naddress = \"h1\"\n[[agent]]\naddress = \"h2\"\n";
        let f = load_text(&format!(
            "topology = \"star\"\ncenter = \"h2\"\n{agents}{TESTS}"
        ));
        assert_eq!(f.unwrap().topology, Topology::Star(1));
        let f = load_text(&format!(
            "topology = \"pairs\"\npairs = [[\"h2\", \"h1\"]]\n{agents}{TESTS}"
        ));
        assert_eq!(f.unwrap().topology, Topology::Pairs(vec![(1, 0)]));
        for (text, want) in [
            ("topology = \"ring\"\n", ":1: key 'topology'"),
            ("topology = \"star\"\n", "key 'center'"),
            (
                "topology = \"pairs\"\npairs = [[\"h1\", \"h9\"]]\n",
                ":2: key 'pairs': 'h9'",
            ),
            ("topology = \"pairs\"\npairs = [[\"h1\"]]\n", "key 'pairs'"),
        ] {
            let e = format!(
                "{:#}",
                load_text(&format!("{text}{agents}{TESTS}")).err().unwrap()
            );
            assert!(e.contains(want), "{e}");
        }
        let e = load_text(&format!(
            "{agents}[[test]]\ntype = \"stream\"\nconnections = 0\n"
        ));
        let e = format!("{:#}", e.err().unwrap());
        assert!(e.contains(":8: key 'connections'"), "{e}");
        let e = load_text("name = \"z\"\n[[agent]]\naddress = \"h1\"\n[[test]]\ntype = \"ping\"\n");
        assert!(format!("{:#}", e.err().unwrap()).contains("at least two agents"));
        let e = load_text("name = \"z\"\n[[agent]]\ndns = \"nowhere.test\"\n");
        assert!(format!("{:#}", e.err().unwrap()).contains(":3: key 'dns': nowhere.test"));
    }
}
