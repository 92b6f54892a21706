//! iperf3's authentication, the client's part (`sonde stream/pps --iperf3
//! --iperf3-username USER --iperf3-rsa-public-key FILE`, the password in
//! `IPERF3_PASSWORD` as iperf3's own client reads it): the username, password and clock
//! encrypted with the server's RSA public key and sent base64-encoded as the `authtoken`
//! parameter. iperf3 from 3.17 on pads with OAEP (SHA-1, as OpenSSL's
//! `RSA_PKCS1_OAEP_PADDING`) unless both ends say `--use-pkcs1-padding`; earlier versions
//! (Debian's 3.12 among them) with PKCS#1 v1.5. The padding is not negotiated, so it is
//! the user's choice, OAEP by default as iperf3's own client. Only the public key is
//! used: no private-key operation runs here.

use std::path::{Path, PathBuf};

use base64::Engine;
use rsa::pkcs1::DecodeRsaPublicKey;
use rsa::pkcs8::DecodePublicKey;
use rsa::rand_core::{CryptoRng, RngCore};
use rsa::{Oaep, Pkcs1v15Encrypt, RsaPublicKey};

/// The environment variable iperf3's client reads the password from.
pub const PASSWORD_ENV: &str = "IPERF3_PASSWORD";
/// Largest public key file read: a PEM of an 8192-bit key is under 2 KiB.
const KEY_FILE_MAX_BYTES: u64 = 64 * 1024;

/// The RSA padding of the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// OAEP with SHA-1: iperf3 3.17 and later.
    Oaep,
    /// PKCS#1 v1.5: iperf3 before 3.17, or both ends with `--use-pkcs1-padding`.
    Pkcs1,
}

impl Padding {
    pub fn name(self) -> &'static str {
        match self {
            Padding::Oaep => "OAEP",
            Padding::Pkcs1 => "PKCS#1 v1.5",
        }
    }
}

/// Credentials or a key iperf3's authentication cannot use; [`AuthError::flag`] names
/// the flag to change.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("{}: {reason}", path.display())]
    Key { path: PathBuf, reason: String },
    #[error("{0}")]
    Credentials(String),
    #[error("the credentials do not fit the RSA key's {bits}-bit block with {padding} padding: {reason}", padding = padding.name())]
    TooLong {
        bits: usize,
        padding: Padding,
        reason: String,
    },
}

impl AuthError {
    pub fn flag(&self) -> &'static str {
        match self {
            AuthError::Key { .. } => "--iperf3-rsa-public-key",
            _ => "--iperf3-username",
        }
    }
}

/// What a client proves itself with to an iperf3 server that requires authentication.
#[derive(Clone)]
pub struct Iperf3Auth {
    pub username: String,
    password: String,
    key: RsaPublicKey,
    pub padding: Padding,
}

impl std::fmt::Debug for Iperf3Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iperf3Auth")
            .field("username", &self.username)
            .field("padding", &self.padding)
            .finish_non_exhaustive()
    }
}

impl Iperf3Auth {
    /// The credentials, checked as iperf3's server reads them, and the server's public
    /// key from `key_file` (PEM: `PUBLIC KEY` as `openssl rsa -pubout` writes it, which
    /// iperf3 reads, or `RSA PUBLIC KEY`).
    pub fn load(
        username: &str,
        password: &str,
        key_file: &Path,
        padding: Padding,
    ) -> Result<Iperf3Auth, AuthError> {
        if let Some(why) = sonde_proto::iperf3::auth::credentials_problem(username, password) {
            let why = why.replace("the password", &format!("the password ({PASSWORD_ENV})"));
            return Err(AuthError::Credentials(why));
        }
        let bad = |reason: String| AuthError::Key {
            path: key_file.to_path_buf(),
            reason,
        };
        let len = std::fs::metadata(key_file)
            .map_err(|e| bad(e.to_string()))?
            .len();
        if len > KEY_FILE_MAX_BYTES {
            return Err(bad(format!(
                "{len} bytes, not a PEM public key (at most {KEY_FILE_MAX_BYTES})"
            )));
        }
        let pem = std::fs::read_to_string(key_file).map_err(|e| bad(e.to_string()))?;
        let key = RsaPublicKey::from_public_key_pem(pem.trim())
            .or_else(|_| RsaPublicKey::from_pkcs1_pem(pem.trim()))
            .map_err(|e| bad(format!("not a PEM RSA public key ({e})")))?;
        Ok(Iperf3Auth {
            username: username.to_string(),
            password: password.to_string(),
            key,
            padding,
        })
    }

    /// What `--iperf3-username`, `--iperf3-rsa-public-key` and
    /// `--iperf3-use-pkcs1-padding` say, the password read from [`PASSWORD_ENV`]; none
    /// without a username.
    pub fn from_flags(
        username: Option<&str>,
        key_file: Option<&Path>,
        pkcs1: bool,
    ) -> Result<Option<Iperf3Auth>, sonde_results::SpecError> {
        let (Some(user), Some(key)) = (username, key_file) else {
            return Ok(None);
        };
        let password = std::env::var(PASSWORD_ENV).map_err(|_| sonde_results::SpecError {
            flag: "--iperf3-username",
            reason: format!("the password comes from {PASSWORD_ENV}, which is not set"),
        })?;
        let padding = if pkcs1 { Padding::Pkcs1 } else { Padding::Oaep };
        Iperf3Auth::load(user, &password, key, padding)
            .map(Some)
            .map_err(|e| sonde_results::SpecError {
                flag: e.flag(),
                reason: e.to_string(),
            })
    }

    /// The `authtoken` for a test starting at `unix_s` (this host's clock, which the
    /// server holds to its own).
    pub fn token(&self, unix_s: i64) -> Result<String, AuthError> {
        let text = sonde_proto::iperf3::auth::token_text(&self.username, &self.password, unix_s);
        let mut rng = Kernel;
        let sealed = match self.padding {
            Padding::Oaep => self
                .key
                .encrypt(&mut rng, Oaep::new::<sha1::Sha1>(), text.as_bytes()),
            Padding::Pkcs1 => self.key.encrypt(&mut rng, Pkcs1v15Encrypt, text.as_bytes()),
        };
        let sealed = sealed.map_err(|e| AuthError::TooLong {
            bits: rsa::traits::PublicKeyParts::size(&self.key) * 8,
            padding: self.padding,
            reason: e.to_string(),
        })?;
        Ok(base64::engine::general_purpose::STANDARD.encode(sealed))
    }
}

/// The kernel's CSPRNG (`crate::random`), as the padding's randomness.
struct Kernel;

impl RngCore for Kernel {
    fn next_u32(&mut self) -> u32 {
        crate::random::u64() as u32
    }
    fn next_u64(&mut self) -> u64 {
        crate::random::u64()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        crate::random::fill(dest);
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rsa::rand_core::Error> {
        crate::random::fill(dest);
        Ok(())
    }
}

impl CryptoRng for Kernel {}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1024-bit public key made once with openssl for these tests (its private half
    /// was not kept: the tests against iperf3 and openssl decrypt with keys of their own).
    const PUBLIC: &str = include_str!("auth_test_public.pem");

    fn auth(padding: Padding) -> Iperf3Auth {
        let path = std::env::temp_dir().join(format!("sonde-auth-test-{}.pem", std::process::id()));
        std::fs::write(&path, PUBLIC).unwrap();
        let a = Iperf3Auth::load("mario", "rossi", &path, padding).unwrap();
        let _ = std::fs::remove_file(&path);
        a
    }

    /// A token is the key's block (128 bytes for 1024 bits) in base64, fresh each time.
    #[test]
    fn a_token_is_one_rsa_block_in_base64() {
        for padding in [Padding::Oaep, Padding::Pkcs1] {
            let a = auth(padding);
            let token = a.token(1_700_000_000).unwrap();
            let sealed = base64::engine::general_purpose::STANDARD
                .decode(&token)
                .unwrap();
            assert_eq!(sealed.len(), 128, "{padding:?}");
            assert_ne!(token, a.token(1_700_000_000).unwrap(), "random padding");
        }
    }

    #[test]
    fn bad_keys_and_credentials_are_refused_by_flag() {
        let path = std::env::temp_dir().join(format!("sonde-auth-bad-{}.pem", std::process::id()));
        std::fs::write(&path, "not a key").unwrap();
        let e = Iperf3Auth::load("mario", "rossi", &path, Padding::Oaep).unwrap_err();
        assert_eq!(e.flag(), "--iperf3-rsa-public-key");
        assert!(e.to_string().contains("not a PEM RSA public key"), "{e}");
        let _ = std::fs::remove_file(&path);
        let e = Iperf3Auth::load("mario", "ros si", &path, Padding::Oaep).unwrap_err();
        assert!(e.to_string().contains("IPERF3_PASSWORD"), "{e}");
        assert_eq!(e.flag(), "--iperf3-username");
        // A username too long for the key's block is refused before any connection.
        let long = "u".repeat(200);
        let mut a = auth(Padding::Oaep);
        a.username = long;
        let e = a.token(0).unwrap_err();
        assert!(e.to_string().contains("1024-bit block with OAEP"), "{e}");
    }
}
