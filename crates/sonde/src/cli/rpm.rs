//! `sonde rpm URL` (the draft's client) and `serve --rpm` (its test endpoint): their flags,
//! checked into `sonde-rpm`'s options. The draft's parameters keep their names in the
//! flags' help (MAD, ID, MNP, MPS, ...).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use sonde_results::spec::units::{parse_bits, parse_bytes, parse_duration_ms};
use sonde_rpm::server::Limits;
use sonde_run::rpm::{EndpointConfig, RpmFlags};
use sonde_run::stamp::Cidr;

use super::OutputArgs;

/// `sonde rpm URL`.
#[derive(Args, Debug)]
pub struct RpmArgs {
    /// The test endpoint's configuration: `https://HOST[:PORT]` (its /.well-known/nq) or the
    /// configuration's full URL (Apple's, Cloudflare's, `sonde serve --rpm`'s).
    #[arg(value_name = "URL")]
    pub url: String,
    /// Accept the server's certificate without verifying it (a self-signed test server).
    #[arg(long, conflicts_with = "ca")]
    pub insecure: bool,
    /// Trust the CAs (or the self-signed certificate) of this PEM file instead of the
    /// system's.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// ID: the interval at which stability is judged.
    #[arg(long, default_value = "5", value_parser = parse_duration_ms, value_name = "SECS")]
    pub interval: u64,
    /// MAD: intervals in each moving average.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64), value_name = "N")]
    pub mad: u32,
    /// MNP: most load-generating connections a direction opens.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=64), value_name = "N")]
    pub max_connections: u32,
    /// MPS: most probe pairs (a foreign and a self probe) a second.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100), value_name = "PER_S")]
    pub max_probes: u32,
    /// Time limit of each direction's stage; the result then says its confidence.
    #[arg(long, default_value = "20", value_parser = parse_duration_ms, value_name = "SECS")]
    pub stage_limit: u64,
    /// Measure the download only.
    #[arg(long, conflicts_with = "upload_only")]
    pub download_only: bool,
    /// Measure the upload only.
    #[arg(long)]
    pub upload_only: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl RpmArgs {
    /// The flags as the run layer checks them ([`RpmFlags::test`]).
    pub fn flags(&self) -> RpmFlags {
        RpmFlags {
            url: self.url.clone(),
            insecure: self.insecure,
            ca: self.ca.clone(),
            interval_ms: self.interval,
            mad: self.mad,
            max_connections: self.max_connections,
            max_probes: self.max_probes,
            stage_limit_ms: self.stage_limit,
            download_only: self.download_only,
            upload_only: self.upload_only,
        }
    }
}

/// `serve --rpm`'s flags.
#[derive(Args, Debug, Default)]
pub struct RpmServeArgs {
    /// Also serve the IETF responsiveness test endpoint (networkQuality, mach, `sonde rpm`)
    /// on TCP [ADDR:]PORT: HTTP/2 over TLS 1.3, its configuration at /.well-known/nq. It
    /// answers loopback and --rpm-allow's networks only.
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = sonde_run::serve::parse_rpm_bind)]
    pub rpm: Option<SocketAddr>,
    /// Networks besides loopback the RPM endpoint serves, CIDR (comma list, repeatable).
    #[arg(long, value_delimiter = ',', value_name = "CIDR", requires = "rpm")]
    pub rpm_allow: Vec<Cidr>,
    /// The endpoint's certificate chain (PEM); without it a self-signed one is made at
    /// start and its SHA-256 printed.
    #[arg(long, value_name = "FILE", requires_all = ["rpm", "rpm_key"])]
    pub rpm_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "rpm_cert")]
    pub rpm_key: Option<PathBuf>,
    /// Serve HTTP/2 in the clear (h2c, prior knowledge) instead of TLS: for tests.
    #[arg(long, requires = "rpm", conflicts_with = "rpm_cert")]
    pub rpm_h2c: bool,
    /// Connections served at once; the next is answered 503 naming this limit.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000), value_name = "N")]
    pub rpm_max_connections: u32,
    /// How long one connection may last.
    #[arg(long, default_value = "120", value_parser = parse_duration_ms, value_name = "SECS")]
    pub rpm_max_duration: u64,
    /// Bits a second of all RPM transfers together, both ways (k/M/G) [default: no cap].
    #[arg(long, value_parser = parse_bits, value_name = "BITS")]
    pub rpm_max_bitrate: Option<f64>,
    /// Memory of the endpoint's HTTP/2 windows and buffers, all connections together.
    #[arg(long, default_value = "512M", value_parser = parse_bytes, value_name = "BYTES")]
    pub rpm_max_memory: u64,
    /// The endpoint's TCP congestion control (one this kernel lists in
    /// tcp_available_congestion_control) [default: the system's].
    #[arg(long, value_name = "NAME", requires = "rpm")]
    pub rpm_congestion: Option<String>,
}

impl RpmServeArgs {
    /// The endpoint these flags ask for, or none without `--rpm`.
    pub fn endpoint(&self) -> Option<EndpointConfig> {
        Some(EndpointConfig {
            bind: self.rpm?,
            allow: self.rpm_allow.clone(),
            cert: self.rpm_cert.clone().zip(self.rpm_key.clone()),
            h2c: self.rpm_h2c,
            limits: Limits {
                max_connections: self.rpm_max_connections as usize,
                max_duration: Duration::from_millis(self.rpm_max_duration.max(1)),
                max_bitrate: self.rpm_max_bitrate.filter(|b| b.is_finite()),
                max_memory_bytes: self.rpm_max_memory,
            },
            congestion: self.rpm_congestion.clone(),
        })
    }
}
