//! Which test a spec or document is: the `test` tag of both, typed so that a reader
//! matches on it instead of on strings.

use serde::{Deserialize, Serialize};

/// A test's name, as `TestSpec`'s tag and `Document.test` spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestName {
    Stream,
    Ping,
    Rpc,
    Pps,
    Load,
    Watch,
    Stamp,
    Rpm,
}

impl TestName {
    /// Every test, in the order reports list them.
    pub const ALL: [TestName; 8] = [
        TestName::Stream,
        TestName::Ping,
        TestName::Rpc,
        TestName::Pps,
        TestName::Load,
        TestName::Watch,
        TestName::Stamp,
        TestName::Rpm,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TestName::Stream => "stream",
            TestName::Ping => "ping",
            TestName::Rpc => "rpc",
            TestName::Pps => "pps",
            TestName::Load => "load",
            TestName::Watch => "watch",
            TestName::Stamp => "stamp",
            TestName::Rpm => "rpm",
        }
    }
}

impl std::fmt::Display for TestName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::TestName;

    #[test]
    fn serde_names_are_the_strings() {
        for t in TestName::ALL {
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", t.as_str()));
            assert_eq!(serde_json::from_str::<TestName>(&json).unwrap(), t);
        }
    }
}
