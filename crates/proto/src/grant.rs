//! Consent for a test between two agents. The serving agent B hands the controller a grant:
//! "I expect the client at this address, at my data address, with this cookie, until then",
//! MACed with B's key. The client agent A sends nothing to B's data port until the grant
//! checks out under its own key (the fleet's key), for the address A itself will send from,
//! so a controller cannot aim a client part at a host that is not an agent waiting for it.

use std::net::{IpAddr, SocketAddr};

use hmac::Mac;
use serde::{Deserialize, Serialize};

use crate::auth::{HmacSha256, Key};

/// Longest validity a grant may claim; a grant is used within seconds of its making.
pub const MAX_GRANT_S: u64 = 120;
/// Clock difference between two agents tolerated when checking an expiry.
pub const CLOCK_SKEW_S: u64 = 30;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The client agent's address, the only source B accepts data from.
    pub client: IpAddr,
    /// B's data address.
    pub server: SocketAddr,
    /// The test's cookie, which every data connection or packet carries.
    pub cookie: u64,
    /// Until when (Unix seconds, B's clock) B waits for the client.
    pub expires_unix_s: u64,
    /// HMAC-SHA256 of the above under the key, hex.
    pub mac: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("no grant from the serving agent: a client part needs one (a controller that did not set up the serving agent, or an agent without --key-file)")]
    Missing,
    #[error("the grant was not made with this agent's key")]
    Forged,
    #[error("the grant is for {what} {granted}, not {asked}")]
    Mismatch {
        what: &'static str,
        granted: String,
        asked: String,
    },
    #[error("the grant expired {0} s ago")]
    Expired(u64),
    #[error("the grant claims {0} s of validity, over the {MAX_GRANT_S} s allowed")]
    TooLong(u64),
}

fn mac_of(key: &Key, client: IpAddr, server: SocketAddr, cookie: u64, expires: u64) -> HmacSha256 {
    let (c, s) = (client.to_string(), server.to_string());
    let parts: [&[u8]; 5] = [
        b"grant",
        c.as_bytes(),
        s.as_bytes(),
        &cookie.to_be_bytes(),
        &expires.to_be_bytes(),
    ];
    key.mac(&parts)
}

impl Grant {
    /// B's grant for `client` at `server` with `cookie`, valid until `expires_unix_s`.
    pub fn new(
        key: &Key,
        client: IpAddr,
        server: SocketAddr,
        cookie: u64,
        expires_unix_s: u64,
    ) -> Grant {
        Grant {
            client,
            server,
            cookie,
            expires_unix_s,
            mac: hex::encode(
                mac_of(key, client, server, cookie, expires_unix_s)
                    .finalize()
                    .into_bytes(),
            ),
        }
    }

    /// Whether this grant lets `client` (the address A sends from) send to `server` with
    /// `cookie` now.
    pub fn check(
        &self,
        key: &Key,
        client: IpAddr,
        server: SocketAddr,
        cookie: u64,
        now_unix_s: u64,
    ) -> Result<(), GrantError> {
        let given = hex::decode(&self.mac).map_err(|_| GrantError::Forged)?;
        // In constant time, by the HMAC crate's comparison.
        mac_of(
            key,
            self.client,
            self.server,
            self.cookie,
            self.expires_unix_s,
        )
        .verify_slice(&given)
        .map_err(|_| GrantError::Forged)?;
        let mismatch = |what, granted: String, asked: String| {
            Err(GrantError::Mismatch {
                what,
                granted,
                asked,
            })
        };
        if self.client != client {
            return mismatch("client", self.client.to_string(), client.to_string());
        }
        if self.server != server {
            return mismatch("server", self.server.to_string(), server.to_string());
        }
        if self.cookie != cookie {
            return mismatch("cookie", self.cookie.to_string(), cookie.to_string());
        }
        if self.expires_unix_s + CLOCK_SKEW_S < now_unix_s {
            return Err(GrantError::Expired(now_unix_s - self.expires_unix_s));
        }
        let validity = self.expires_unix_s.saturating_sub(now_unix_s);
        if validity > MAX_GRANT_S + CLOCK_SKEW_S {
            return Err(GrantError::TooLong(validity));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_holds_only_for_its_client_server_cookie_and_time() {
        let k = Key::from_file_bytes(b"correct horse battery staple").unwrap();
        let other = Key::from_file_bytes(b"correct horse battery stapl3").unwrap();
        let a: IpAddr = "198.18.0.11".parse().unwrap();
        let b: SocketAddr = "198.18.0.12:40000".parse().unwrap();
        let g = Grant::new(&k, a, b, 7, 1_000);
        assert_eq!(g.check(&k, a, b, 7, 990), Ok(()));
        assert_eq!(g.check(&other, a, b, 7, 990), Err(GrantError::Forged));
        let victim: SocketAddr = "198.18.0.13:53".parse().unwrap();
        assert!(matches!(
            g.check(&k, a, victim, 7, 990),
            Err(GrantError::Mismatch { what: "server", .. })
        ));
        assert!(matches!(
            g.check(&k, "198.18.0.14".parse().unwrap(), b, 7, 990),
            Err(GrantError::Mismatch { what: "client", .. })
        ));
        assert!(g.check(&k, a, b, 8, 990).is_err());
        assert_eq!(g.check(&k, a, b, 7, 1_100), Err(GrantError::Expired(100)));
        assert_eq!(g.check(&k, a, b, 7, 1), Err(GrantError::TooLong(999)));
        // Fields changed after the MAC was made.
        let mut moved = g.clone();
        moved.server = victim;
        assert_eq!(moved.check(&k, a, victim, 7, 990), Err(GrantError::Forged));
        let mut longer = g.clone();
        longer.expires_unix_s += 1;
        assert_eq!(longer.check(&k, a, b, 7, 990), Err(GrantError::Forged));
    }
}
