//! The far end's own view, when it is `sonde serve --rpm`: `GET /sonde/tcp_info` answers
//! the TCP_INFO of the very connection the request came in on (the connection's socket is
//! all the answer reads), so a client learns its own connections' figures as the server's
//! kernel sees them (the download's sender: its chronographs, retransmissions, RTT) and
//! nothing of any other client's. Other servers answer 404, and the client records none.

use serde::{Deserialize, Serialize};
use sonde_engine::TcpInfo;

/// The path of the server's reading.
pub const PATH: &str = "/sonde/tcp_info";

/// The figures of a TCP_INFO reading an interval's sample needs (the stream kind's
/// [`sonde_engine::tcp_sample::sample`]), as the server's kernel gave them; absent where
/// it gave none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    pub total_retrans: u32,
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub snd_cwnd: u32,
    pub snd_mss: u32,
    pub snd_ssthresh: Option<u32>,
    pub lost: u32,
    pub reordering: u32,
    pub rcv_space: u32,
    pub pacing_rate: u64,
    pub min_rtt_us: Option<u32>,
    pub notsent_bytes: Option<u32>,
    pub delivery_rate: Option<u64>,
    pub busy_us: Option<u64>,
    pub rwnd_limited_us: Option<u64>,
    pub sndbuf_limited_us: Option<u64>,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub dsack_dups: Option<u32>,
    pub snd_wnd: Option<u32>,
    pub rcv_wnd: Option<u32>,
}

impl From<&TcpInfo> for Reading {
    fn from(t: &TcpInfo) -> Reading {
        Reading {
            total_retrans: t.total_retrans,
            rtt_us: t.rtt_us,
            rttvar_us: t.rttvar_us,
            snd_cwnd: t.snd_cwnd,
            snd_mss: t.snd_mss,
            snd_ssthresh: t.snd_ssthresh,
            lost: t.lost,
            reordering: t.reordering,
            rcv_space: t.rcv_space,
            pacing_rate: t.pacing_rate,
            min_rtt_us: t.min_rtt_us,
            notsent_bytes: t.notsent_bytes,
            delivery_rate: t.delivery_rate,
            busy_us: t.busy_us,
            rwnd_limited_us: t.rwnd_limited_us,
            sndbuf_limited_us: t.sndbuf_limited_us,
            bytes_acked: t.bytes_acked,
            bytes_received: t.bytes_received,
            dsack_dups: t.dsack_dups,
            snd_wnd: t.snd_wnd,
            rcv_wnd: t.rcv_wnd,
        }
    }
}

impl Reading {
    /// The reading as the engine's type (ECN and what is not carried left unset).
    pub fn info(&self) -> TcpInfo {
        TcpInfo {
            total_retrans: self.total_retrans,
            rtt_us: self.rtt_us,
            rttvar_us: self.rttvar_us,
            snd_cwnd: self.snd_cwnd,
            snd_mss: self.snd_mss,
            snd_ssthresh: self.snd_ssthresh,
            lost: self.lost,
            reordering: self.reordering,
            rcv_space: self.rcv_space,
            pacing_rate: self.pacing_rate,
            min_rtt_us: self.min_rtt_us,
            notsent_bytes: self.notsent_bytes,
            delivery_rate: self.delivery_rate,
            busy_us: self.busy_us,
            rwnd_limited_us: self.rwnd_limited_us,
            sndbuf_limited_us: self.sndbuf_limited_us,
            bytes_acked: self.bytes_acked,
            bytes_received: self.bytes_received,
            dsack_dups: self.dsack_dups,
            snd_wnd: self.snd_wnd,
            rcv_wnd: self.rcv_wnd,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_carries_what_a_sample_reads_and_absent_stays_absent() {
        let t = TcpInfo {
            total_retrans: 7,
            rtt_us: 31_000,
            rwnd_limited_us: Some(400_000),
            sndbuf_limited_us: None,
            bytes_acked: 1 << 20,
            pacing_rate: u64::MAX,
            ..Default::default()
        };
        let wire = serde_json::to_string(&Reading::from(&t)).unwrap();
        let back: Reading = serde_json::from_str(&wire).unwrap();
        assert_eq!(back.info(), t);
        assert!(wire.contains(r#""sndbuf_limited_us":null"#), "{wire}");
    }
}
