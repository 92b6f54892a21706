//! `--iperf3-username`, `--iperf3-rsa-public-key`, `--iperf3-use-pkcs1-padding`: the
//! credentials `sonde stream/pps --iperf3` proves to an `iperf3 -s` that requires
//! iperf3's authentication, the password from `IPERF3_PASSWORD` as iperf3's own client
//! reads it (never on the command line, which the document records).

use std::path::PathBuf;

use clap::Args;
use sonde_results::SpecError;
use sonde_run::iperf3::Iperf3Auth;
use sonde_run::measure::Plan;

#[derive(Args, Debug, Clone, Default)]
pub struct Iperf3AuthArgs {
    /// With --iperf3: the username for an iperf3 server that requires authentication
    /// (iperf3's --username); the password comes from IPERF3_PASSWORD.
    #[arg(
        long,
        value_name = "USER",
        requires = "iperf3",
        requires = "iperf3_rsa_public_key"
    )]
    pub iperf3_username: Option<String>,
    /// With --iperf3-username: the server's RSA public key, PEM (iperf3's
    /// --rsa-public-key-path).
    #[arg(long, value_name = "FILE", requires = "iperf3_username")]
    pub iperf3_rsa_public_key: Option<PathBuf>,
    /// With --iperf3-username: PKCS#1 v1.5 padding, for an iperf3 server before 3.17 or
    /// one started with --use-pkcs1-padding [default: OAEP, iperf3 3.17's].
    #[arg(long, requires = "iperf3_username")]
    pub iperf3_use_pkcs1_padding: bool,
}

impl Iperf3AuthArgs {
    /// `plan` with the credentials, when it is a test against an iperf3 server.
    pub fn onto(&self, plan: Plan) -> Result<Plan, SpecError> {
        let auth = || {
            Iperf3Auth::from_flags(
                self.iperf3_username.as_deref(),
                self.iperf3_rsa_public_key.as_deref(),
                self.iperf3_use_pkcs1_padding,
            )
        };
        match plan {
            Plan::Iperf3(spec, _) => Ok(Plan::Iperf3(spec, auth()?)),
            other => Ok(other),
        }
    }
}

#[cfg(test)]
mod tests {
    /// The flags go together and only with --iperf3; each refusal names what is missing.
    #[test]
    fn the_credentials_need_iperf3_and_each_other() {
        for (line, missing) in [
            (
                "stream h --iperf3-username u --iperf3-rsa-public-key k",
                "--iperf3",
            ),
            (
                "stream h --iperf3 --iperf3-username u",
                "--iperf3-rsa-public-key",
            ),
            (
                "pps h --iperf3 --iperf3-rsa-public-key k",
                "--iperf3-username",
            ),
            (
                "stream h --iperf3 --iperf3-use-pkcs1-padding",
                "--iperf3-username",
            ),
        ] {
            let words = std::iter::once("sonde").chain(line.split(' '));
            let e = <super::super::Cli as clap::Parser>::try_parse_from(words).unwrap_err();
            assert!(e.to_string().contains(missing), "{line}: {e}");
        }
    }
}
