//! What an operator opts an agent into (`sonde serve --allow dpdk,xdp,third-party`).
//! Everything here is off by default: a kernel-bypass engine takes a device (and runs
//! testpmd as root), and a third-party part makes this host send to another one, so an
//! agent does neither unless the person who started it said so.

use std::collections::BTreeSet;

use sonde_results::stamps::StampSource;
use sonde_results::{Engine, TestSpec};

/// One thing an agent may be allowed to do beyond the kernel engine's tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Allow {
    /// `--engine dpdk`: dpdk-testpmd on a device of this host.
    Dpdk,
    /// `--engine xdp`: an XDP program and AF_XDP sockets on an interface of this host.
    Xdp,
    /// Either part of a test between two agents (`sonde_proto::THIRD_PARTY`).
    ThirdParty,
    /// `--stamps hardware|auto`: switching the test device's hardware timestamping on
    /// for the test (SIOCSHWTSTAMP), the previous setting put back after it.
    Hwstamps,
}

impl Allow {
    pub const ALL: [Allow; 4] = [Allow::Dpdk, Allow::Xdp, Allow::ThirdParty, Allow::Hwstamps];

    /// The word `--allow` takes, and the capability or engine name it stands for.
    pub fn name(self) -> &'static str {
        match self {
            Allow::Dpdk => Engine::Dpdk.name(),
            Allow::Xdp => Engine::Xdp.name(),
            Allow::ThirdParty => sonde_proto::THIRD_PARTY,
            Allow::Hwstamps => "hwstamps",
        }
    }

    /// What running `engine` needs allowed; `None` for the kernel engine (always allowed).
    pub fn for_engine(engine: Engine) -> Option<Allow> {
        match engine {
            // io_uring drives the kernel's own sockets: nothing of the host is taken.
            Engine::Kernel | Engine::Uring => None,
            Engine::Xdp => Some(Allow::Xdp),
            Engine::Dpdk => Some(Allow::Dpdk),
        }
    }
}

/// A test this agent was not started to allow, naming the `--allow` word that would.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAllowed {
    #[error("--engine {engine} is not allowed on this agent (start the agent with --allow {})", .allow.name())]
    Engine { engine: Engine, allow: Allow },
    #[error("a part of a test between two agents is not allowed on this agent (start the agent with --allow {})", Allow::ThirdParty.name())]
    ThirdParty,
    #[error("--stamps hardware switches on the hardware timestamping of this agent's NIC, which is not allowed on this agent (start the agent with --allow {}, or ask --stamps auto to fall back to software)", Allow::Hwstamps.name())]
    Hwstamps,
}

/// The set an agent was started with; empty by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowed(BTreeSet<Allow>);

impl FromIterator<Allow> for Allowed {
    fn from_iter<I: IntoIterator<Item = Allow>>(iter: I) -> Self {
        Allowed(iter.into_iter().collect())
    }
}

impl Allowed {
    /// Everything: what a controller's own host runs with (its user's command line).
    pub fn all() -> Allowed {
        Allow::ALL.into_iter().collect()
    }

    pub fn contains(&self, a: Allow) -> bool {
        self.0.contains(&a)
    }

    /// Whether `engine` may run here (the kernel engine always may).
    pub fn engine(&self, engine: Engine) -> bool {
        Allow::for_engine(engine).is_none_or(|a| self.contains(a))
    }

    /// For the startup line: `dpdk, xdp`, or `nothing beyond kernel tests`.
    pub fn describe(&self) -> String {
        if self.0.is_empty() {
            return "nothing beyond kernel-socket tests (--allow dpdk,xdp,third-party,hwstamps)"
                .into();
        }
        let names: Vec<&str> = self.0.iter().map(|a| a.name()).collect();
        names.join(", ")
    }

    /// Refuses a spec whose engine, or a part (`third_party`), this agent was not started
    /// to allow, naming the flag that would.
    pub fn check(&self, spec: &TestSpec, third_party: bool) -> Result<(), NotAllowed> {
        let engine = spec.execution().engine;
        if let Some(allow) = Allow::for_engine(engine).filter(|a| !self.contains(*a)) {
            return Err(NotAllowed::Engine { engine, allow });
        }
        if third_party && !self.contains(Allow::ThirdParty) {
            return Err(NotAllowed::ThirdParty);
        }
        if spec.stamps() == StampSource::Hardware && !self.contains(Allow::Hwstamps) {
            return Err(NotAllowed::Hwstamps);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::PpsSpec;

    fn pps(engine: &str) -> TestSpec {
        let mut p = PpsSpec::default();
        p.execution.engine = engine.parse().unwrap();
        TestSpec::Pps(p)
    }

    #[test]
    fn nothing_beyond_the_kernel_engine_by_default() {
        let none = Allowed::default();
        assert!(none.check(&pps("kernel"), false).is_ok());
        let e = none.check(&pps("dpdk"), false).unwrap_err().to_string();
        assert!(e.contains("--allow dpdk"), "{e}");
        let e = none.check(&pps("xdp"), false).unwrap_err().to_string();
        assert!(e.contains("--allow xdp"), "{e}");
        let e = none.check(&pps("kernel"), true).unwrap_err();
        assert_eq!(e, NotAllowed::ThirdParty);
        assert!(e.to_string().contains("--allow third-party"), "{e}");
        assert!(none.describe().starts_with("nothing"));
    }

    #[test]
    fn what_is_allowed_runs() {
        let some: Allowed = [Allow::Xdp, Allow::ThirdParty].into_iter().collect();
        assert!(some.check(&pps("xdp"), true).is_ok());
        assert!(some.check(&pps("dpdk"), false).is_err());
        assert_eq!(some.describe(), "xdp, third-party");
        assert!(Allowed::all().check(&pps("dpdk"), true).is_ok());
    }

    /// Hardware stamps change the NIC's configuration: refused by name unless allowed;
    /// `auto` is admitted (it falls back to software at the end that does not allow).
    #[test]
    fn hardware_stamps_need_their_allow() {
        let ping = |stamps| {
            let mut r = sonde_results::RrSpec {
                stages: true,
                stamps,
                ..Default::default()
            };
            r.execution.engine = Engine::Kernel;
            TestSpec::Ping(r)
        };
        let e = Allowed::default()
            .check(&ping(StampSource::Hardware), false)
            .unwrap_err();
        assert_eq!(e, NotAllowed::Hwstamps);
        assert!(e.to_string().contains("--allow hwstamps"), "{e}");
        assert!(Allowed::default()
            .check(&ping(StampSource::Auto), false)
            .is_ok());
        let hw: Allowed = [Allow::Hwstamps].into_iter().collect();
        assert!(hw.check(&ping(StampSource::Hardware), false).is_ok());
    }

    #[test]
    fn an_agent_announces_only_what_it_allows() {
        let caps = crate::kind::capabilities_allowed(&Allowed::default());
        assert!(caps.iter().any(|c| c == "pps") && caps.iter().any(|c| c == "rpc"));
        // io_uring drives the kernel's sockets: offered without --allow, where it runs.
        let bypass = |c: &String| c.contains('/') && !c.ends_with("/uring");
        assert!(
            !caps.iter().any(|c| bypass(c) || c == "third-party"),
            "{caps:?}"
        );
        let uring = sonde_engine::uring::available().is_ok();
        assert_eq!(caps.iter().any(|c| c == "rpc/uring"), uring, "{caps:?}");
        let xdp: Allowed = [Allow::Xdp].into_iter().collect();
        let caps = crate::kind::capabilities_allowed(&xdp);
        assert!(caps.iter().any(|c| c == "pps/xdp") && caps.iter().any(|c| c == "ping/xdp"));
        assert!(
            !caps.iter().any(|c| c == "pps/dpdk" || c == "third-party"),
            "{caps:?}"
        );
        let all = crate::kind::capabilities();
        assert!(all.iter().any(|c| c == "pps/dpdk") && all.iter().any(|c| c == "third-party"));
    }
}
