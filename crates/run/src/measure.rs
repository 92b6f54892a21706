//! One measurement command from a typed plan to its documents, the same pipeline for
//! every kind: a heading, the run (live intervals as they come), each document kept, its
//! summary. What a kind looks like ([`Look`]) and where output goes ([`Output`]: the
//! terminal, the store) are the caller's, since this layer neither renders nor stores;
//! `sonde TEST`, suites, fleets and the lab all run through here.

use std::process::ExitStatus;

use sonde_probe::hostwatch::HostProbe;
use sonde_results::document::load::PhaseRun;
use sonde_results::document::{IntervalFigures, Trial};
use sonde_results::{Document, IntervalSample, LoadSpec, PpsSpec, StampSpec, TestSpec, WatchSpec};

use crate::controller::{self, ControllerError, LiveInterval, TestRequest};
use crate::search::{self, SearchError, SearchParams};
use crate::signals::Interrupt;
use crate::watch::{self, WatchError};

/// What a command measures.
pub enum Plan {
    /// Tests one after another (ping and rpc: one per receive mode); a test cut short
    /// ends the list.
    Tests(Vec<TestSpec>),
    /// The RFC 2544 zero-loss rate: a search over whole pps trials.
    Search(PpsSpec, SearchParams),
    /// Phases of pings beside a load, one document for them all.
    Load(LoadSpec),
    /// A command with this host watched (no agent); `stdout_to_stderr` keeps the
    /// command's output off a stdout that carries JSON.
    Watch {
        spec: WatchSpec,
        probe: HostProbe,
        stdout_to_stderr: bool,
    },
    /// STAMP to a reflector (no agent there), from this host or from the target's `from`
    /// agent; `key` in authenticated mode (this host only).
    Stamp {
        spec: StampSpec,
        key: Option<sonde_proto::stamp::StampKey>,
    },
    /// A stream test against an `iperf3 -s` (no agent there): iperf3's port (5201) unless
    /// the target names another than the agent's; with credentials for a server that
    /// requires iperf3's authentication.
    Iperf3(TestSpec, Option<crate::iperf3::Iperf3Auth>),
    /// A kind with a runner of its own (no agent at the far end): the door a new such kind
    /// comes in by, without a variant here.
    Own(Box<dyn Runner>),
}

/// A kind that runs without an agent at the far end, to one document: what its plan
/// holds ([`Plan::Own`]).
pub trait Runner: Send {
    /// The spec its heading is made from.
    fn spec(&self) -> TestSpec;
    /// Runs it; `command` is the command line, for the record.
    fn run(self: Box<Self>, command: &str, interrupt: &Interrupt) -> Result<Document, OwnError>;
}

/// Why a [`Runner`] measured nothing, in its own words (its error type, boxed).
pub type OwnError = Box<dyn std::error::Error + Send + Sync>;

/// `ping --cstate-sweep`: each spec once per idle state of this host, with the CPU latency
/// limit at that state's exit latency (so it is the deepest allowed); a host that exposes
/// no idle states runs the specs once, without a limit, and `say`s so.
pub fn cstate_sweep(specs: Vec<TestSpec>, say: &dyn Fn(&str)) -> Vec<TestSpec> {
    let states = sonde_probe::inventory::idle_states(std::path::Path::new("/"));
    let mut limits: Vec<u64> = states.iter().map(|s| s.exit_latency_us).collect();
    limits.sort_unstable();
    limits.dedup();
    if limits.is_empty() {
        say("--cstate-sweep: this host exposes no CPU idle states (no cpuidle driver): one run, without a limit");
        return specs;
    }
    let limited = |spec: &TestSpec, us: u64| {
        let mut s = spec.clone();
        s.execution_mut().cpu_latency_us = Some(us.min(i32::MAX as u64) as u32);
        s
    };
    specs
        .iter()
        .flat_map(|spec| limits.iter().map(move |&us| limited(spec, us)))
        .collect()
}

/// Where tests go: the serving agent, or two agents (`from` runs the client side).
#[derive(Clone)]
pub struct Target {
    pub host: String,
    pub from: Option<String>,
    pub port: u16,
    pub key: Option<sonde_proto::Key>,
    /// A fleet's run: the pair of the fleet file these tests measure.
    pub fleet: Option<sonde_results::document::FleetPair>,
}

impl Target {
    /// The agent at `host` on its control `port` (the test run `from` another agent, when
    /// given), proving `key`; not a fleet's run.
    pub fn new(
        host: String,
        from: Option<String>,
        port: u16,
        key: Option<sonde_proto::Key>,
    ) -> Target {
        Target {
            host,
            from,
            port,
            key,
            fleet: None,
        }
    }

    /// How headings name the path: `to HOST:PORT`, or `from A to B:PORT`.
    pub fn path(&self) -> String {
        let to = format!("to {}:{}", self.host, self.port);
        match &self.from {
            Some(from) => format!("from {from} {to}"),
            None => to,
        }
    }
}

/// How a kind looks to a person: the caller's renderers.
pub trait Look: Sync {
    /// The line before a test (or a search, a load, a watch) starts.
    fn heading(&self, spec: &TestSpec, path: &str, search: bool) -> String;
    /// One interval of a test as both sides measured it.
    fn live(
        &self,
        spec: &TestSpec,
        client: Option<&IntervalSample>,
        server: Option<&IntervalSample>,
    ) -> String;
    /// One interval of a watch.
    fn watch_line(&self, figures: &IntervalFigures) -> String;
    /// One search trial, numbered from 1.
    fn trial(&self, n: usize, trial: &Trial) -> String;
    /// One phase of a load, as it ends.
    fn phase(&self, run: &PhaseRun) -> String;
    /// The text after a document is kept (ends with a newline).
    fn summary(&self, doc: &Document) -> String;
}

/// An interval as it happens, for a live display or an event stream.
pub enum Live<'a> {
    Test(LiveInterval<'a>),
    Watch(&'a IntervalFigures),
}

/// Where a command's output goes: the caller's terminal, store and event stream.
pub trait Output: Sync {
    /// Human text (a heading, a trial, a summary), as given.
    fn say(&self, text: &str);
    /// An interval as it happens; `line` renders it for a person.
    fn interval(&self, live: Live<'_>, line: &dyn Fn() -> String);
    /// A finished document, assembled: stored, streamed.
    fn keep(&self, doc: &Document);
}

#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error(transparent)]
    Test(#[from] ControllerError),
    #[error(transparent)]
    Search(#[from] SearchError),
    #[error(transparent)]
    Watch(#[from] WatchError),
    #[error(transparent)]
    Stamp(#[from] crate::stamp::sender::StampRunError),
    #[error(transparent)]
    Iperf3(#[from] crate::iperf3::Iperf3RunError),
    #[error("--tune: {0}")]
    Tune(#[from] crate::tune::TuneError),
    #[error(transparent)]
    Own(OwnError),
}

/// What a measurement produced.
pub struct Measured {
    pub docs: Vec<Document>,
    /// Documents the plan would have made run to the end (fewer: cut short).
    pub asked: usize,
    /// A watched command's exit status.
    pub status: Option<ExitStatus>,
}

impl Measured {
    /// Cut short: a document is partial, or a test of the list never ran.
    pub fn partial(&self) -> bool {
        self.docs.iter().any(|d| d.end.partial) || self.docs.len() < self.asked
    }
}

/// One measurement through the pipeline: heading, run, keep, summary for each document.
pub struct Measurement<'a> {
    pub target: &'a Target,
    /// The exact command line, for the record.
    pub command: &'a str,
    pub look: &'a dyn Look,
    pub out: &'a dyn Output,
    pub interrupt: &'a Interrupt,
}

impl Measurement<'_> {
    /// Runs `plan` to its documents. Errors only when nothing was measured.
    pub fn run(&self, plan: Plan) -> Result<Measured, MeasureError> {
        let path = self.target.path();
        match plan {
            Plan::Tests(specs) => self.tests(specs, &path),
            Plan::Search(spec, params) => {
                let test = TestSpec::Pps(spec.clone());
                self.say_line(self.look.heading(&test, &path, true));
                let doc = self.search(&spec, &params)?;
                Ok(self.finish(vec![doc], 1, None))
            }
            Plan::Load(spec) => {
                self.say_line(
                    self.look
                        .heading(&TestSpec::Load(spec.clone()), &path, false),
                );
                let run = |s: &TestSpec| self.test(s, false);
                let mut done = |r: &PhaseRun| self.say_line(self.look.phase(r));
                let doc =
                    crate::load::run_load(&spec, self.command, &run, self.interrupt, &mut done)?;
                Ok(self.finish(vec![doc], 1, None))
            }
            Plan::Watch {
                spec,
                probe,
                stdout_to_stderr,
            } => {
                let test = TestSpec::Watch(spec.clone());
                self.say_line(self.look.heading(&test, &path, false));
                let mut live = |i: &IntervalFigures| {
                    self.out
                        .interval(Live::Watch(i), &|| self.look.watch_line(i));
                };
                let (doc, status) = watch::watch(
                    &spec,
                    &probe,
                    self.command,
                    self.interrupt,
                    stdout_to_stderr,
                    &mut live,
                )?;
                Ok(self.finish(vec![doc], 1, Some(status)))
            }
            Plan::Own(runner) => {
                self.say_line(self.look.heading(&runner.spec(), &path, false));
                let doc = runner
                    .run(self.command, self.interrupt)
                    .map_err(MeasureError::Own)?;
                Ok(self.finish(vec![doc], 1, None))
            }
            Plan::Iperf3(spec, auth) => {
                self.say_line(self.look.heading(&spec, &path, false));
                let doc = self.iperf3(&spec, auth.as_ref())?;
                Ok(self.finish(vec![doc], 1, None))
            }
            Plan::Stamp { spec, key } => {
                let test = TestSpec::Stamp(spec.clone());
                self.say_line(self.look.heading(&test, &path, false));
                let doc = match &self.target.from {
                    Some(agent) => self.stamp_from(agent, &spec)?,
                    None => crate::stamp::sender::run(
                        &spec,
                        key.as_ref(),
                        self.command,
                        self.interrupt,
                    )?,
                };
                Ok(self.finish(vec![doc], 1, None))
            }
        }
    }

    /// A STAMP run sent by the agent `agent` (`--from`): unauthenticated, since the
    /// controller's STAMP key never crosses the control connection.
    fn stamp_from(&self, agent: &str, spec: &StampSpec) -> Result<Document, ControllerError> {
        let from = controller::stamp_from::StampFrom {
            agent,
            port: self.target.port,
            key: self.target.key.as_ref(),
            command: self.command,
            fleet: self.target.fleet.as_ref(),
        };
        controller::stamp_from::run_from(spec, &from, self.interrupt)
    }

    /// Each spec in turn, until one is cut short or Ctrl-C.
    fn tests(&self, specs: Vec<TestSpec>, path: &str) -> Result<Measured, MeasureError> {
        let asked = specs.len();
        let mut docs: Vec<Document> = Vec::new();
        for spec in &specs {
            if self.interrupt.is_set() || docs.last().is_some_and(|d| d.end.partial) {
                break;
            }
            self.say_line(self.look.heading(spec, path, false));
            let doc = self.test(spec, true)?;
            docs.extend(self.finish(vec![doc], 1, None).docs);
        }
        Ok(Measured {
            docs,
            asked,
            status: None,
        })
    }

    /// Keeps each document and says its summary.
    fn finish(&self, docs: Vec<Document>, asked: usize, status: Option<ExitStatus>) -> Measured {
        for doc in &docs {
            self.out.keep(doc);
            self.out.say(&self.look.summary(doc));
        }
        Measured {
            docs,
            asked,
            status,
        }
    }

    /// One test against the target; `live` shows its intervals (not a trial's or a
    /// phase's, which run beside others).
    pub fn test(&self, spec: &TestSpec, live: bool) -> Result<Document, ControllerError> {
        let req = TestRequest {
            host: self.target.host.clone(),
            from: self.target.from.clone(),
            port: self.target.port,
            spec: spec.clone(),
            command: self.command.to_string(),
            key: self.target.key.clone(),
            fleet: self.target.fleet.clone(),
        };
        let mut show = |l: LiveInterval<'_>| {
            if live {
                let (c, s) = (l.client, l.server);
                self.out
                    .interval(Live::Test(l), &|| self.look.live(spec, c, s));
            }
        };
        controller::run_test(&req, self.interrupt, &mut show)
    }

    /// One stream test against an iperf3 server, its intervals shown live.
    fn iperf3(
        &self,
        spec: &TestSpec,
        auth: Option<&crate::iperf3::Iperf3Auth>,
    ) -> Result<Document, crate::iperf3::Iperf3RunError> {
        let port = match self.target.port {
            crate::agent::DEFAULT_PORT => sonde_proto::iperf3::DEFAULT_PORT,
            p => p,
        };
        let req = TestRequest {
            host: self.target.host.clone(),
            from: None,
            port,
            spec: spec.clone(),
            command: self.command.to_string(),
            key: None,
            fleet: self.target.fleet.clone(),
        };
        let mut show = |l: LiveInterval<'_>| {
            let (c, s) = (l.client, l.server);
            self.out
                .interval(Live::Test(l), &|| self.look.live(spec, c, s));
        };
        crate::iperf3::run(&req, auth, self.interrupt, &mut show)
    }

    /// The zero-loss search: trials without live lines, each said as it ends.
    fn search(&self, spec: &PpsSpec, params: &SearchParams) -> Result<Document, MeasureError> {
        let mut n = 0;
        let mut on_trial = |t: &Trial| {
            n += 1;
            self.say_line(self.look.trial(n, t));
        };
        let mut trial = |s: &TestSpec| {
            if self.interrupt.is_set() {
                return Err("interrupted".into());
            }
            Ok(self.test(s, false)?)
        };
        Ok(search::search(spec, params, &mut trial, &mut on_trial)?)
    }

    fn say_line(&self, line: String) {
        self.out.say(&format!("{line}\n"));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use sonde_results::document::{End, RrEnd, Section};
    use sonde_results::RrSpec;

    use super::*;
    use crate::report_look::Report;

    /// A kind with its own runner: one ping document, or its own error.
    struct Own(bool);

    impl Runner for Own {
        fn spec(&self) -> TestSpec {
            TestSpec::Ping(RrSpec::default())
        }

        fn run(self: Box<Self>, command: &str, _: &Interrupt) -> Result<Document, OwnError> {
            if !self.0 {
                return Err("the far end said no".into());
            }
            let end = End::new(false, None, Section::Rr(RrEnd::default()));
            let mut doc = crate::tests::local_doc(&self.spec(), end);
            doc.start.command = command.to_string();
            Ok(doc)
        }
    }

    /// What the pipeline said and kept.
    #[derive(Default)]
    struct Heard(Mutex<(Vec<String>, Vec<String>)>);

    impl Output for Heard {
        fn say(&self, text: &str) {
            self.0.lock().unwrap().0.push(text.to_string());
        }

        fn interval(&self, _: Live<'_>, _: &dyn Fn() -> String) {}

        fn keep(&self, doc: &Document) {
            self.0.lock().unwrap().1.push(doc.start.command.clone());
        }
    }

    #[test]
    fn a_kind_with_its_own_runner_comes_in_by_plan_own() {
        let target = Target {
            host: "198.18.0.2".into(),
            from: None,
            port: 0,
            key: None,
            fleet: None,
        };
        let (heard, interrupt) = (Heard::default(), Interrupt::none());
        let m = Measurement {
            target: &target,
            command: "sonde own 198.18.0.2",
            look: &Report,
            out: &heard,
            interrupt: &interrupt,
        };
        let done = m.run(Plan::Own(Box::new(Own(true)))).unwrap();
        assert_eq!((done.docs.len(), done.partial()), (1, false));
        let (said, kept) = std::mem::take(&mut *heard.0.lock().unwrap());
        assert_eq!(
            kept,
            ["sonde own 198.18.0.2"],
            "kept once, with its command"
        );
        let heading = Report.heading(&TestSpec::Ping(RrSpec::default()), &target.path(), false);
        assert_eq!(said[0], format!("{heading}\n"), "the heading first");
        assert!(said.len() >= 2, "then the summary: {said:?}");
        let e = m.run(Plan::Own(Box::new(Own(false)))).err().unwrap();
        assert_eq!(e.to_string(), "the far end said no");
    }
}
