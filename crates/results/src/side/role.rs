//! Who measured a figure, and what that side did with a direction's bytes: the two facts
//! every section is keyed by, apart from the sections so that they import no section.

use serde::{Deserialize, Serialize};

/// Which process measured a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The controller: the side that ran `sonde stream`.
    Client,
    /// The agent: `sonde serve`.
    Server,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Server => "server",
        }
    }

    /// The client's or the server's of a pair of values, as this role is.
    pub fn pick<T>(self, client: T, server: T) -> T {
        match self {
            Role::Client => client,
            Role::Server => server,
        }
    }
}

/// What this side did with a direction's bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transfer {
    #[default]
    Send,
    Receive,
}
