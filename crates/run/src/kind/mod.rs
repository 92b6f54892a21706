//! The test kinds this build runs, as one table ([`KINDS`]): each kind's module owns what
//! is particular to it (opening the controller's and the agent's data endpoints, starting
//! each side, what it asks of an agent's limits, how many workers the agent places, its
//! log line) behind the [`Kind`] seam (`seam.rs`), and its own table of engines. The
//! controller and the agent only ever talk to a [`Kind`], found from the spec by [`of`].
//!
//! Adding a kind: an engine module (`sonde-engine`), a module here implementing [`Kind`]
//! with its [`Side`](crate::side::Side), a CLI module, and its variants in `TestSpec` and
//! `Document`.

pub mod budget;
pub mod congestion;
pub mod connect;
pub mod dpdk;
pub mod dpdk_source;
mod host;
pub mod path;
pub mod pps;
pub mod rr;
pub mod seam;
pub mod stream;
pub mod table;
pub mod workers;
pub mod xdp;

pub use connect::CONNECT_TIMEOUT;
pub(crate) use host::root;
pub use seam::{
    ClientAt, ClientEndpoint, DataPort, Demand, Kind, OpenError, OpenResult, ServerEndpoint, Typed,
    TypedKind,
};
pub use workers::Workers;

use sonde_probe::hostwatch::HostProbe;
use sonde_results::{Engine, Role, SpecError, TestSpec};

use crate::allow::{Allow, Allowed};

/// One kind of test as this build lists it.
pub struct Listed {
    /// The test names it runs (`TestSpec::name`, the commands).
    pub names: &'static [&'static str],
    /// Its engine table's engines; the first is the default.
    pub engines: fn() -> Vec<Engine>,
    /// Those this host can run: what an agent announces.
    pub runnable: fn() -> Vec<Engine>,
    /// What of a spec its engine does not run, naming the flag (each engine's own).
    pub refuse: fn(&TestSpec) -> Result<(), SpecError>,
    pub kind: &'static dyn Kind,
}

/// Every kind of test this build runs.
pub const KINDS: &[Listed] = &[
    Listed {
        names: &["stream"],
        engines: stream::engines,
        runnable: stream::runnable,
        refuse: stream::refuse,
        kind: &Typed(stream::Stream),
    },
    Listed {
        names: &["ping", "rpc"],
        engines: rr::engines,
        runnable: rr::runnable,
        refuse: rr::refuse,
        kind: &Typed(rr::RequestResponse),
    },
    Listed {
        names: &["pps"],
        engines: pps::engines,
        runnable: pps::runnable,
        refuse: pps::refuse,
        kind: &Typed(pps::Pps),
    },
];

/// `None` for a spec no single test runs (a load: the controller runs it as several).
fn listing(spec: &TestSpec) -> Option<&'static Listed> {
    let name = spec.name();
    KINDS.iter().find(|k| k.names.contains(&name))
}

/// The kind that runs `spec`; `None` for a spec no single test runs.
pub fn of(spec: &TestSpec) -> Option<&'static dyn Kind> {
    listing(spec).map(|l| l.kind)
}

/// Every test this build runs, by the name its command and its spec carry.
pub fn test_names() -> Vec<&'static str> {
    KINDS.iter().flat_map(|k| k.names.iter().copied()).collect()
}

/// Everything this build runs: each test name with each of its kind's engines
/// ([`TestSpec::capability`]), and that it takes either part of a test between two agents.
pub fn capabilities() -> Vec<String> {
    capabilities_allowed(&Allowed::all())
}

/// What an agent started with `allowed` announces in `Welcome`: the kernel engine's tests,
/// and only the engines and parts its operator allowed (`sonde serve --allow`).
pub fn capabilities_allowed(allowed: &Allowed) -> Vec<String> {
    let third_party = allowed
        .contains(Allow::ThirdParty)
        .then(|| sonde_proto::THIRD_PARTY.to_string());
    KINDS
        .iter()
        .flat_map(|k| {
            k.names.iter().flat_map(|name| {
                (k.runnable)()
                    .into_iter()
                    .filter(|engine| allowed.engine(*engine))
                    .map(|engine| sonde_results::spec::capability(name, engine))
            })
        })
        .chain(third_party)
        .collect()
}

/// A spec without `--engine` (`engine_auto`) gets the engine its kind measured fastest
/// for it; a side whose host cannot run that one runs the kernel engine ([`table::choose`]).
pub fn default_engine(spec: &mut TestSpec) {
    if !spec.execution().engine_auto {
        return;
    }
    if let Some(kind) = of(spec) {
        spec.execution_mut().engine = kind.fastest(spec);
    }
}

/// Refuses an engine the spec's kind does not have in this build, naming `--engine` (and
/// a spec no single test runs, naming the test), then what of the spec its engine does
/// not run, naming the flag ([`refuse`]).
pub fn check_engine(spec: &TestSpec) -> Result<(), SpecError> {
    has_engine(spec)?;
    refuse(spec)
}

/// What of `spec` its engine does not run, naming the flag: each engine's own options and
/// refusals, from its kind's table.
pub fn refuse(spec: &TestSpec) -> Result<(), SpecError> {
    refuse_marks(spec)?;
    listing(spec).map_or(Ok(()), |l| (l.refuse)(spec))
}

/// `--dscp`/`--ecn` are set through the sockets' IP_TOS: an engine that writes its own
/// frames does not set them, and says so rather than send unmarked; pps over AF_XDP writes
/// the TOS into its frames and reads it from those it receives.
fn refuse_marks(spec: &TestSpec) -> Result<(), SpecError> {
    let ex = spec.execution();
    let unmarked = match ex.engine {
        Engine::Dpdk => true,
        Engine::Xdp => !matches!(spec, TestSpec::Pps(_)),
        Engine::Kernel | Engine::Uring => false,
    };
    let frames = unmarked && !ex.engine_auto;
    match (ex.marks.dscp, ex.marks.ecn) {
        (Some(_), _) if frames => Err(marks_refused("--dscp", ex.engine)),
        (_, Some(_)) if frames => Err(marks_refused("--ecn", ex.engine)),
        _ => Ok(()),
    }
}

fn marks_refused(flag: &'static str, engine: Engine) -> SpecError {
    SpecError {
        flag,
        reason: format!("the {engine} engine writes its own frames and does not mark them yet: use --engine kernel"),
    }
}

/// Refuses an engine the spec's kind does not have in this build, naming `--engine` (and
/// a spec no single test runs, naming the test).
pub fn has_engine(spec: &TestSpec) -> Result<(), SpecError> {
    let Some(listed) = listing(spec) else {
        return Err(SpecError {
            flag: "test",
            reason: format!("'{}' is not run as one test", spec.name()),
        });
    };
    let engines = (listed.engines)();
    let engine = spec.execution().engine;
    if engines.contains(&engine) {
        return Ok(());
    }
    Err(SpecError {
        flag: "--engine",
        reason: format!(
            "{} has no '{engine}' engine (it has: {})",
            spec.name(),
            engines
                .iter()
                .map(|e| e.name())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// Chooses `role`'s CPUs on this host when its spec says `auto`, for as many workers as
/// the kind runs there: the controller from the near end of the preferred cores, the agent
/// from the far end, so that both ends on one host (the lab) pick different ones.
pub fn place(spec: &mut TestSpec, role: Role) {
    let Some(kind) = of(spec) else { return };
    let workers = kind.workers(spec, role);
    let ex = spec.execution_mut();
    let (auto, cpus, end) = match role {
        Role::Client => (
            &mut ex.client_cpus_auto,
            &mut ex.client_cpus,
            sonde_probe::placement::Pick::First,
        ),
        Role::Server => (
            &mut ex.server_cpus_auto,
            &mut ex.server_cpus,
            sonde_probe::placement::Pick::Last,
        ),
    };
    if !std::mem::take(auto) {
        return;
    }
    let inv = sonde_probe::inventory::collect_live();
    let allowed = sonde_probe::topology::allowed_cpus();
    *cpus = sonde_probe::placement::choose(&inv, &allowed, workers, end);
}

/// Holds `--cpu-latency-us` on this side's host for as long as `probe` lives (the test);
/// the error names the flag and the device.
pub fn hold_cpu_latency(probe: &mut HostProbe, spec: &TestSpec) -> Result<(), OpenError> {
    let Some(us) = spec.execution().cpu_latency_us else {
        return Ok(());
    };
    probe.hold_cpu_latency(us).map_err(|e| OpenError::Setting {
        flag: "--cpu-latency-us",
        reason: format!("cannot hold the CPU latency limit ({e}; it needs root)"),
    })
}

/// `--stamps` at this side's end (`whose`: "this agent's", "this host's"): decided on the
/// device `probe` observes, the device's hardware stamping held for as long as `probe`
/// lives (the test) when switched on; the refusal names the flag and the device.
pub fn hold_stamps(
    probe: &mut HostProbe,
    spec: &TestSpec,
    stamping: &crate::hwstamps::Stamping,
    whose: &str,
) -> Result<(), OpenError> {
    let asked = spec.stamps();
    if asked.is_software() {
        return Ok(());
    }
    let (said, held) =
        crate::hwstamps::arrange(asked, stamping, probe.iface(), whose).map_err(|reason| {
            OpenError::Setting {
                flag: "--stamps",
                reason,
            }
        })?;
    probe.hold_stamps(said, held.map(|h| Box::new(h) as Box<dyn Send + Sync>));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::{PpsSpec, RrSpec, StreamSpec};

    fn spec(name: &str, engine: Engine) -> TestSpec {
        let mut spec = match name {
            "stream" => TestSpec::Stream(StreamSpec::default()),
            "ping" => TestSpec::Ping(RrSpec::default()),
            "rpc" => TestSpec::Rpc(RrSpec::default()),
            "pps" => TestSpec::Pps(PpsSpec::default()),
            other => panic!("no spec for {other}"),
        };
        spec.execution_mut().engine = engine;
        // AF_XDP carries UDP only: its own refusal otherwise (`refusal_tests`).
        if let TestSpec::Ping(r) | TestSpec::Rpc(r) = &mut spec {
            r.transport = sonde_results::Transport::Udp;
        }
        // DPDK needs its part of the spec: its own refusal otherwise (`refusal_tests`).
        if let TestSpec::Pps(p) = &mut spec {
            p.dpdk = (engine == Engine::Dpdk).then(Box::default);
        }
        spec
    }

    #[test]
    fn each_kind_lists_its_engines_and_refuses_the_others_naming_the_flag() {
        assert_eq!(stream::engines(), [Engine::Kernel, Engine::Uring]);
        assert_eq!(rr::engines(), [Engine::Kernel, Engine::Xdp, Engine::Uring]);
        assert_eq!(pps::engines(), [Engine::Kernel, Engine::Xdp, Engine::Dpdk]);
        for listed in KINDS {
            let has = (listed.engines)();
            assert_eq!(
                has[0],
                Engine::Kernel,
                "the kernel engine is every kind's default"
            );
            for name in listed.names {
                for engine in Engine::ALL {
                    match check_engine(&spec(name, engine)) {
                        Ok(()) => assert!(has.contains(&engine), "{name} ran {engine}"),
                        Err(e) => {
                            assert!(!has.contains(&engine), "{name} refused {engine}: {e}");
                            assert_eq!(e.flag, "--engine");
                            assert!(e.reason.contains(engine.name()), "{e}");
                        }
                    }
                }
            }
        }
        // A peer that skipped admission meets the table's own refusal.
        let e = stream::backend(Engine::Dpdk).err().unwrap().to_string();
        assert!(e.contains("--engine dpdk"), "{e}");
        let e = rr::backend(Engine::Dpdk).err().unwrap().to_string();
        assert!(e.contains("--engine dpdk"), "{e}");
        assert!(pps::backend(Engine::Dpdk).is_ok());
    }
}

/// Each engine's own options and refusals, checked once by [`check_engine`], each
/// naming its flag.
#[cfg(test)]
mod refusal_tests {
    use super::*;
    use sonde_results::marks::{Dscp, Ecn, Marks};
    use sonde_results::{PpsSpec, RrSpec, StreamSpec, Transport};

    fn rpc(engine: Engine, f: impl Fn(&mut RrSpec)) -> Result<(), SpecError> {
        let mut r = RrSpec::default();
        r.execution.engine = engine;
        f(&mut r);
        check_engine(&TestSpec::Rpc(r))
    }

    fn stream(engine: Engine, f: impl Fn(&mut StreamSpec)) -> Result<(), SpecError> {
        let mut s = StreamSpec::default();
        s.execution.engine = engine;
        f(&mut s);
        check_engine(&TestSpec::Stream(s))
    }

    fn refused(r: Result<(), SpecError>, flag: &str, says: &str) {
        let e = r.expect_err("refused");
        assert_eq!(e.flag, flag, "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }

    fn udp(r: &mut RrSpec) {
        r.transport = Transport::Udp;
    }

    #[test]
    fn sqpoll_is_io_urings() {
        let sqpoll = |r: &mut RrSpec| r.sqpoll = true;
        refused(rpc(Engine::Kernel, sqpoll), "--sqpoll", "uring only");
        let xdp = |r: &mut RrSpec| {
            udp(r);
            r.sqpoll = true
        };
        refused(rpc(Engine::Xdp, xdp), "--sqpoll", "not xdp");
        rpc(Engine::Uring, sqpoll).unwrap();
    }

    #[test]
    fn a_connection_per_request_is_refused_by_io_uring() {
        let crr = |r: &mut RrSpec| (r.connect_per_request, r.window) = (true, 1);
        refused(rpc(Engine::Uring, crr), "--crr", "--engine kernel");
        rpc(Engine::Kernel, crr).unwrap();
    }

    #[test]
    fn stages_are_the_socket_engines_on_open_connections() {
        let stages = |r: &mut RrSpec| r.stages = true;
        rpc(Engine::Kernel, stages).unwrap();
        rpc(Engine::Uring, stages).unwrap();
        let xdp = |r: &mut RrSpec| (r.stages, r.transport) = (true, Transport::Udp);
        refused(
            rpc(Engine::Xdp, xdp),
            "--stages",
            "--engine kernel or uring, not xdp",
        );
        let crr = |r: &mut RrSpec| (r.stages, r.connect_per_request, r.window) = (true, true, 1);
        refused(rpc(Engine::Kernel, crr), "--stages", "--crr");
        refused(rpc(Engine::Uring, crr), "--crr", "--engine kernel");
    }

    #[test]
    fn af_xdp_carries_udp_only() {
        refused(rpc(Engine::Xdp, |_| {}), "--engine", "UDP only");
        rpc(Engine::Xdp, udp).unwrap();
    }

    #[test]
    fn zerocopy_is_io_urings_and_for_large_sends() {
        let zc = |s: &mut StreamSpec| s.zerocopy = true;
        refused(stream(Engine::Kernel, zc), "--zerocopy", "uring only");
        let small = |s: &mut StreamSpec| (s.zerocopy, s.buffer_bytes) = (true, 8192);
        refused(stream(Engine::Uring, small), "--zerocopy", "--buffer");
        let large = |s: &mut StreamSpec| (s.zerocopy, s.buffer_bytes) = (true, 64 << 10);
        stream(Engine::Uring, large).unwrap();
    }

    #[test]
    fn dpdk_refuses_what_testpmd_cannot_run_naming_the_flag() {
        let pps = |engine, f: &dyn Fn(&mut PpsSpec)| {
            let mut s = PpsSpec {
                dpdk: Some(Box::default()),
                ..PpsSpec::default()
            };
            s.execution.engine = engine;
            f(&mut s);
            check_engine(&TestSpec::Pps(s))
        };
        pps(Engine::Dpdk, &|_| {}).unwrap();
        refused(
            pps(Engine::Dpdk, &|s| s.dpdk = None),
            "--engine",
            "its part",
        );
        refused(pps(Engine::Dpdk, &|s| s.ipv6 = true), "--engine", "IPv4");
        refused(pps(Engine::Dpdk, &|s| s.gso = true), "--gso", "dpdk");
        let queues = |s: &mut PpsSpec| s.dpdk.as_mut().unwrap().tx_queues = 5000;
        refused(pps(Engine::Dpdk, &queues), "--tx-queues", "1..=1024");
        let queues = |s: &mut PpsSpec| s.dpdk.as_mut().unwrap().rx_queues = 5000;
        refused(pps(Engine::Dpdk, &queues), "--rx-queues", "1..=1024");
        let few = |s: &mut PpsSpec| s.dpdk.as_mut().unwrap().descriptors = 8;
        refused(pps(Engine::Dpdk, &few), "--descriptors", "64..=32768");
        // The other engines: the kernel's GSO is theirs.
        pps(Engine::Kernel, &|s| (s.dpdk, s.gso) = (None, true)).unwrap();
    }

    /// pps over AF_XDP marks its own frames; DPDK's and AF_XDP's request/response frames
    /// are not marked, refused naming the flag rather than sent unmarked.
    #[test]
    fn marks_are_refused_only_where_an_engines_frames_do_not_carry_them() {
        let ef = Marks {
            dscp: Dscp::parse("ef").ok(),
            ..Marks::default()
        };
        let ect1 = Marks {
            ecn: Some(Ecn::Ect1),
            ..Marks::default()
        };
        let pps = |engine: Engine, marks: Marks| {
            let mut s = PpsSpec {
                dpdk: (engine == Engine::Dpdk).then(Box::default),
                ..PpsSpec::default()
            };
            (s.execution.engine, s.execution.marks) = (engine, marks);
            check_engine(&TestSpec::Pps(s))
        };
        pps(Engine::Xdp, ef).unwrap();
        pps(Engine::Xdp, ect1).unwrap();
        refused(
            pps(Engine::Dpdk, ef),
            "--dscp",
            "dpdk engine writes its own frames",
        );
        refused(pps(Engine::Dpdk, ect1), "--ecn", "--engine kernel");
        let marked = |r: &mut RrSpec| (r.transport, r.execution.marks) = (Transport::Udp, ef);
        refused(
            rpc(Engine::Xdp, marked),
            "--dscp",
            "xdp engine writes its own frames",
        );
        rpc(Engine::Kernel, marked).unwrap();
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;
    use sonde_results::StreamSpec;

    /// A receiving io_uring stream connection holds its receive buffers besides its send
    /// buffer: the agent's memory budget counts them, so a controller cannot make an agent
    /// take five times what it admitted.
    #[test]
    fn a_uring_stream_is_budgeted_with_its_receive_buffers() {
        let mut s = StreamSpec {
            connections: 64,
            buffer_bytes: 1 << 20,
            ..Default::default()
        };
        let kernel = stream::Stream.demand(&s, Role::Server);
        s.execution.engine = Engine::Uring;
        let uring = stream::Stream.demand(&s, Role::Server);
        let per_conn = |d: &Demand| d.memory_bytes / 64;
        assert!(
            per_conn(&uring) >= per_conn(&kernel) + 4 * (1 << 20),
            "{} vs {}",
            uring.memory_bytes,
            kernel.memory_bytes
        );
    }

    /// `--sqpoll` starts a polling kernel thread per ring: the agent's thread budget
    /// (`--max-threads`) counts it, so a rogue controller cannot double its threads.
    #[test]
    fn sqpoll_threads_count_against_the_thread_budget() {
        let mut r = sonde_results::RrSpec {
            connections: 8,
            server_threads: Some(4),
            ..Default::default()
        };
        r.execution.engine = Engine::Uring;
        let plain = rr::RequestResponse.demand(&r, Role::Server);
        r.sqpoll = true;
        let polled = rr::RequestResponse.demand(&r, Role::Server);
        assert_eq!(plain.threads, 4);
        assert_eq!(polled.threads, 8);
    }
}
