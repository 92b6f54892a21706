//! The data-plane engines, typed: a spec names one, and every choice of engine matches on
//! this enum (or looks it up in a kind's table) instead of comparing names. Its serde
//! names are the words specs and documents have always carried.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How a side moves its test's bytes.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// Kernel sockets: every kind has it, and it is the default.
    #[default]
    Kernel,
    /// AF_XDP sockets behind an XDP program that steers the test's flows to them.
    Xdp,
    /// dpdk-testpmd on a device DPDK drives.
    Dpdk,
    /// Kernel sockets driven through io_uring: batched submissions, multishot receives.
    Uring,
}

impl Engine {
    /// Every engine this build knows, the default first.
    pub const ALL: [Engine; 4] = [Engine::Kernel, Engine::Xdp, Engine::Dpdk, Engine::Uring];

    /// The word `--engine` takes, and the spec and documents carry.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Kernel => "kernel",
            Engine::Xdp => "xdp",
            Engine::Dpdk => "dpdk",
            Engine::Uring => "uring",
        }
    }

    /// Every engine's word, for a command line's choices.
    pub fn names() -> [&'static str; 4] {
        Engine::ALL.map(Engine::name)
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A word that names no engine; says which ones there are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not an engine (there are: {names})", names = Engine::names().join(", "))]
pub struct UnknownEngine(pub String);

impl FromStr for Engine {
    type Err = UnknownEngine;

    fn from_str(s: &str) -> Result<Engine, UnknownEngine> {
        Engine::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| UnknownEngine(s.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_text_and_json() {
        for e in Engine::ALL {
            assert_eq!(e.to_string().parse::<Engine>(), Ok(e));
            let json = serde_json::to_string(&e).unwrap();
            assert_eq!(json, format!("\"{}\"", e.name()));
            assert_eq!(serde_json::from_str::<Engine>(&json).unwrap(), e);
        }
        assert_eq!(Engine::default(), Engine::Kernel);
        let e = "warp".parse::<Engine>().unwrap_err().to_string();
        assert!(
            e.contains("warp") && e.contains("kernel, xdp, dpdk, uring"),
            "{e}"
        );
        assert!(serde_json::from_str::<Engine>("\"warp\"").is_err());
    }
}
