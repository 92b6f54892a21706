//! The test parameters a client sends (`send_parameters`): the wire form [`Params`], every
//! field optional as iperf3 omits what is at its default, and the checked form [`Test`]
//! a server acts on. Unknown fields are ignored, as iperf3 does; numbers arrive as JSON
//! numbers of any form (cJSON prints 1e+10 for large ones) and are range-checked here.

use serde::{Deserialize, Serialize};

use super::{
    Iperf3Error, MAX_OMIT_S, MAX_STREAMS, MAX_TCP_BLOCK_BYTES, MAX_TIME_S, MAX_UDP_BLOCK_BYTES,
    MIN_UDP_BLOCK_BYTES,
};

/// Longest congestion control name Linux has (`TCP_CA_NAME_MAX` is 16 with the NUL).
const CONGESTION_MAX_CHARS: usize = 15;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Params {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sctp: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omit: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blockcount: Option<f64>,
    #[serde(rename = "MSS", default, skip_serializing_if = "Option::is_none")]
    pub mss: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodelay: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bidirectional: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub len: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fqrate: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub get_server_output: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_counters_64bit: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authtoken: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
}

/// A test as both ends run it, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Test {
    pub protocol: Protocol,
    /// Streams per direction (`-P`).
    pub streams: u32,
    /// The server sends (`-R`).
    pub reverse: bool,
    /// Both send, each on its own streams (`--bidir`).
    pub bidir: bool,
    pub duration_s: u32,
    /// Seconds at the start left out of the figures (`-O`).
    pub omit_s: u32,
    /// Bytes per write (`-l`); 0: the receiver's default.
    pub len_bytes: u32,
    /// Bits per second per stream (`-b`); 0: unlimited.
    pub rate_bits_per_s: u64,
    /// Socket buffer (`-w`).
    pub window_bytes: Option<u32>,
    /// `-C`.
    pub congestion: Option<String>,
    /// UDP sequence numbers of 64 bits (`--udp-counters-64bit`).
    pub udp_64bit: bool,
    pub get_server_output: bool,
    pub client_version: Option<String>,
}

impl Test {
    /// Data connections the test opens: streams, twice over with `--bidir`.
    pub fn connections(&self) -> u32 {
        self.streams * if self.bidir { 2 } else { 1 }
    }

    /// The parameters a client sends for this test.
    pub fn params(&self) -> Params {
        let yes = |b: bool| b.then_some(true);
        Params {
            tcp: yes(self.protocol == Protocol::Tcp),
            udp: yes(self.protocol == Protocol::Udp),
            omit: Some(f64::from(self.omit_s)),
            time: Some(f64::from(self.duration_s)),
            num: Some(0.0),
            blockcount: Some(0.0),
            parallel: Some(f64::from(self.streams)),
            reverse: yes(self.reverse),
            bidirectional: yes(self.bidir),
            window: self.window_bytes.map(f64::from),
            len: (self.len_bytes > 0).then_some(f64::from(self.len_bytes)),
            bandwidth: (self.rate_bits_per_s > 0).then_some(self.rate_bits_per_s as f64),
            congestion: self.congestion.clone(),
            get_server_output: self.get_server_output.then_some(1.0),
            udp_counters_64bit: self.udp_64bit.then_some(1.0),
            client_version: self.client_version.clone(),
            ..Params::default()
        }
    }
}

/// `v` as a whole number in `lo..=hi`, or the error naming `field`.
fn whole(v: f64, field: &str, lo: u64, hi: u64) -> Result<u64, Iperf3Error> {
    if !v.is_finite() || v.fract() != 0.0 || v < lo as f64 || v > hi as f64 {
        return Err(Iperf3Error::BadParams(format!(
            "{field} {v} is not a whole number in {lo}..={hi}"
        )));
    }
    Ok(v as u64)
}

impl Params {
    /// The test these parameters ask for, or why it cannot run. Options iperf3 has that
    /// this end does not serve (byte or block counts, SCTP, RSA authentication) are
    /// refused by name rather than ignored.
    pub fn test(&self) -> Result<Test, Iperf3Error> {
        if self.authtoken.is_some() {
            return Err(Iperf3Error::BadParams(
                "RSA authentication (--username, --rsa-public-key-path) is not supported by sonde serve --iperf3".into(),
            ));
        }
        if self.sctp == Some(true) {
            return Err(Iperf3Error::BadParams(
                "SCTP (--sctp) is not supported".into(),
            ));
        }
        let protocol = match (self.tcp == Some(true), self.udp == Some(true)) {
            (_, true) => Protocol::Udp,
            _ => Protocol::Tcp,
        };
        let count = |v: Option<f64>, field| v.map_or(Ok(0), |v| whole(v, field, 0, u64::MAX >> 11));
        if count(self.num, "num (-n)")? > 0 || count(self.blockcount, "blockcount (-k)")? > 0 {
            return Err(Iperf3Error::BadParams(
                "byte or block counts (-n, -k) are not supported: give a duration (-t)".into(),
            ));
        }
        let duration_s = whole(
            self.time.unwrap_or(10.0),
            "time (-t)",
            1,
            u64::from(MAX_TIME_S),
        )?;
        let omit_s = whole(
            self.omit.unwrap_or(0.0),
            "omit (-O)",
            0,
            u64::from(MAX_OMIT_S),
        )?;
        let streams = whole(
            self.parallel.unwrap_or(1.0),
            "parallel (-P)",
            1,
            u64::from(MAX_STREAMS),
        )?;
        let (lo, hi) = match protocol {
            Protocol::Tcp => (1, MAX_TCP_BLOCK_BYTES),
            Protocol::Udp => (MIN_UDP_BLOCK_BYTES, MAX_UDP_BLOCK_BYTES),
        };
        let len_bytes = match self.len {
            Some(v) => whole(v, "len (-l)", u64::from(lo), u64::from(hi))? as u32,
            None => 0,
        };
        let rate_bits_per_s = match self.bandwidth {
            Some(v) => whole(v, "bandwidth (-b)", 0, 1 << 53)?,
            None => 0,
        };
        let window_bytes = match self.window {
            Some(v) => Some(whole(v, "window (-w)", 0, 512 * 1024 * 1024)? as u32),
            None => None,
        };
        if let Some(c) = &self.congestion {
            let ok = !c.is_empty()
                && c.len() <= CONGESTION_MAX_CHARS
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !ok {
                return Err(Iperf3Error::BadParams(format!(
                    "congestion (-C) {:?} is not a congestion control name",
                    c.chars().take(32).collect::<String>()
                )));
            }
        }
        let flag = |v: Option<f64>| v.is_some_and(|v| v != 0.0);
        Ok(Test {
            protocol,
            streams: streams as u32,
            reverse: self.reverse == Some(true),
            bidir: self.bidirectional == Some(true),
            duration_s: duration_s as u32,
            omit_s: omit_s as u32,
            len_bytes,
            rate_bits_per_s,
            window_bytes,
            congestion: self.congestion.clone(),
            udp_64bit: flag(self.udp_counters_64bit),
            get_server_output: flag(self.get_server_output),
            client_version: self
                .client_version
                .as_ref()
                .map(|v| v.chars().take(32).collect()),
        })
    }
}
