//! The draft's method for one direction ("Final Algorithm"), with no I/O: the caller runs
//! the connections and the probes, and at the end of each interval hands in the bytes
//! moved and the probes completed; [`DirectionRun::end_interval`] says how many
//! load-generating connections to add, whether goodput and then responsiveness are stable
//! (the standard deviation of the last MAD moving averages within SDT of the newest), and
//! when to stop.
//! Time is the caller's: an interval ends when the caller says it did, and its goodput is
//! its bytes over the time since the previous one ended (a late wake-up is a longer
//! interval, not a faster one).

use sonde_results::rpm::{
    per_minute, Component, Confidence, Responsiveness, RpmDirection, RpmInterval, RpmParams,
};
use sonde_results::stats::mean_stddev;

/// The draft's defaults ("Test Parameters"), with a stage limit of 20 s.
pub fn default_params() -> RpmParams {
    RpmParams {
        mad: 4,
        interval_ms: 5000,
        tmp: 0.95,
        sdt: 0.05,
        inp: 1,
        inc: 1,
        mnp: 16,
        mps: 100,
        ptc: 0.05,
        stage_limit_ms: 20_000,
    }
}

/// Bytes a foreign and a self probe move, with TCP and TLS overheads (the draft's estimate:
/// about 5000 and 1000), which PTC weighs against the goodput.
pub const PROBE_PAIR_BYTES: f64 = 6000.0;

/// The single-sided trimmed mean: the smallest `keep` share of `samples` (0.95: the
/// slowest 5 % dropped), at least one kept; its mean and how many it kept.
pub fn trimmed_mean(samples: &[f64], keep: f64) -> Option<(f64, usize)> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let kept = ((sorted.len() as f64 * keep).floor() as usize).clamp(1, sorted.len());
    Some((sorted[..kept].iter().sum::<f64>() / kept as f64, kept))
}

/// Whether the last `mad` values have settled: at least `mad` of them, and their
/// standard deviation within `sdt` of the newest.
pub fn stable(values: &[f64], mad: usize, sdt: f64) -> bool {
    if mad == 0 || values.len() < mad {
        return false;
    }
    let window = &values[values.len() - mad..];
    let (_, sd) = mean_stddev(window).unwrap_or((0.0, f64::INFINITY));
    let newest = window[mad - 1];
    newest > 0.0 && sd < sdt * newest
}

/// The probes' round trips, milliseconds, by kind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Probes {
    pub tcp: Vec<f64>,
    /// Per TLS round trip (empty over plain TCP).
    pub tls: Vec<f64>,
    pub http: Vec<f64>,
    pub loaded: Vec<f64>,
}

impl Probes {
    pub fn extend(&mut self, other: &Probes) {
        self.tcp.extend_from_slice(&other.tcp);
        self.tls.extend_from_slice(&other.tls);
        self.http.extend_from_slice(&other.http);
        self.loaded.extend_from_slice(&other.loaded);
    }

    /// Completed probes (a foreign one counts once, by its HTTP round trip).
    pub fn count(&self) -> u64 {
        (self.http.len() + self.loaded.len()) as u64
    }

    /// The draft's responsiveness from these samples; `None` until both a foreign and a
    /// self probe completed.
    pub fn responsiveness(&self, keep: f64) -> Option<Responsiveness> {
        let component = |s: &[f64]| {
            trimmed_mean(s, keep).map(|(m, kept)| Component {
                trimmed_mean_ms: m,
                count: s.len() as u64,
                kept: kept as u64,
            })
        };
        let tcp = component(&self.tcp)?;
        let http = component(&self.http)?;
        let loaded = component(&self.loaded)?;
        let tls = component(&self.tls);
        let foreign_ms = match &tls {
            Some(t) => (tcp.trimmed_mean_ms + t.trimmed_mean_ms + http.trimmed_mean_ms) / 3.0,
            // TCP only: each part still weighs the same (the draft's "TCP-Only Case").
            None => (tcp.trimmed_mean_ms + http.trimmed_mean_ms) / 2.0,
        };
        let (foreign_rpm, self_rpm) = (per_minute(foreign_ms), per_minute(loaded.trimmed_mean_ms));
        Some(Responsiveness {
            rpm: (foreign_rpm + self_rpm) / 2.0,
            foreign_rpm,
            self_rpm,
            tcp,
            tls,
            http,
            loaded,
        })
    }
}

/// `bytes` over `ms` milliseconds, in bit/s (none moved in no time is 0, not a division by
/// zero).
fn bits_per_second(bytes: u64, ms: f64) -> f64 {
    match ms > 0.0 {
        true => bytes as f64 * 8.0 / (ms / 1e3),
        false => 0.0,
    }
}

/// What the caller does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Go on, with this many more load-generating connections.
    Add(u32),
    /// Responsiveness is stable, or the stage's time is up: stop this direction.
    Stop,
}

/// One direction's run of the method (the draft's "stage"; named apart from the rr
/// latency stages, `sonde_results::stages::Stage`).
pub struct DirectionRun {
    params: RpmParams,
    /// Each interval's bytes, end (ms after the stage's start) and probes, oldest first.
    bytes: Vec<u64>,
    ends_ms: Vec<f64>,
    probes: Vec<Probes>,
    goodput_averages: Vec<f64>,
    rpm_averages: Vec<f64>,
    /// The interval whose end declared goodput saturated.
    saturated_at: Option<usize>,
    rpm_stable: bool,
    connections: u32,
    rows: Vec<RpmInterval>,
}

impl DirectionRun {
    /// A stage that starts with INP connections (the caller opens them).
    pub fn new(params: RpmParams) -> DirectionRun {
        let connections = params.inp.min(params.mnp);
        DirectionRun {
            params,
            bytes: Vec::new(),
            ends_ms: Vec::new(),
            probes: Vec::new(),
            goodput_averages: Vec::new(),
            rpm_averages: Vec::new(),
            saturated_at: None,
            rpm_stable: false,
            connections,
            rows: Vec::new(),
        }
    }

    pub fn connections(&self) -> u32 {
        self.connections
    }

    /// Probe pairs a second: MPS, or fewer so that probes take at most PTC of the
    /// goodput measured so far (at least one a second).
    pub fn probe_rate(&self) -> f64 {
        let Some(&goodput_bps) = self.goodput_averages.last() else {
            return self.params.mps as f64;
        };
        let by_capacity = self.params.ptc * goodput_bps / 8.0 / PROBE_PAIR_BYTES;
        by_capacity.clamp(1.0, self.params.mps as f64)
    }

    /// The end of an interval in which `bytes` moved and `probes` completed, `elapsed_ms`
    /// after the stage's start: what to do next.
    pub fn end_interval(&mut self, bytes: u64, probes: Probes, elapsed_ms: f64) -> Next {
        let mad = self.params.mad.max(1) as usize;
        // Where the stage's time has ended, ms: the start, then each interval's end.
        let end_of = |ends: &[f64], i: usize| if i == 0 { 0.0 } else { ends[i - 1] };
        let i = self.bytes.len();
        let since = end_of(&self.ends_ms, i);
        self.bytes.push(bytes);
        self.ends_ms.push(elapsed_ms.max(since));
        self.probes.push(probes);
        let first = (i + 1).saturating_sub(mad);
        // The draft's moving average: the window's bytes over the MAD intervals' time
        // (fewer at the start, over as many as there were, so the first intervals are not
        // diluted). Their measured time, not MAD x the nominal interval: a loaded client
        // that read 60 ms late counted 10 % over the shaper's rate (ci10, against nginx).
        let window_ms = elapsed_ms - end_of(&self.ends_ms, first);
        let window_bytes = self.bytes[first..].iter().sum::<u64>();
        let average = bits_per_second(window_bytes, window_ms);
        self.goodput_averages.push(average);
        if self.saturated_at.is_none() && stable(&self.goodput_averages, mad, self.params.sdt) {
            self.saturated_at = Some(i);
        }
        let moving_rpm = match self.saturated_at {
            Some(_) => self
                .window_probes()
                .responsiveness(self.params.tmp)
                .map(|r| r.rpm),
            None => None,
        };
        if let Some(rpm) = moving_rpm {
            self.rpm_averages.push(rpm);
            self.rpm_stable = stable(&self.rpm_averages, mad, self.params.sdt);
        }
        self.rows.push(RpmInterval {
            end_s: elapsed_ms / 1e3,
            connections: self.connections,
            goodput_bits_per_second: bits_per_second(bytes, elapsed_ms - since),
            moving_goodput_bits_per_second: average,
            moving_rpm,
            probes: self.probes[i].count(),
            tcp: Vec::new(),
            server_tcp: Vec::new(),
        });
        let limit_ms = self.params.stage_limit_ms as f64;
        if self.rpm_stable || elapsed_ms + self.params.interval_ms as f64 > limit_ms {
            return Next::Stop;
        }
        let add = self
            .params
            .inc
            .min(self.params.mnp - self.connections.min(self.params.mnp));
        self.connections += add;
        Next::Add(add)
    }

    /// The client's TCP_INFO of its load-generating connections over the interval that
    /// ended last (the stream kind's samples); the verdict reads them once both
    /// directions ran (`sonde_results::limit::rpm`).
    pub fn record_tcp(&mut self, samples: Vec<sonde_results::tcp::TcpSample>) {
        if let Some(r) = self.rows.last_mut() {
            r.tcp = samples;
        }
    }

    /// The server's TCP_INFO of a load-generating connection over interval `index` (from
    /// 0), when the far end is `sonde serve --rpm` ([`crate::far`]).
    pub fn record_server_tcp(&mut self, index: usize, sample: sonde_results::tcp::TcpSample) {
        if let Some(r) = self.rows.get_mut(index) {
            r.server_tcp.push(sample);
        }
    }

    /// The probes of the last MAD intervals.
    pub fn window_probes(&self) -> Probes {
        let mad = self.params.mad.max(1) as usize;
        let mut all = Probes::default();
        for p in &self.probes[self.probes.len().saturating_sub(mad)..] {
            all.extend(p);
        }
        all
    }

    /// The stage as it ended, `duration_ms` long.
    pub fn finish(self, duration_ms: u64) -> RpmDirection {
        let mad = self.params.mad.max(1) as usize;
        let confidence = |ran: usize, settled: bool| match (ran >= mad, settled) {
            (false, _) => Confidence::Low,
            (true, false) => Confidence::Medium,
            (true, true) => Confidence::High,
        };
        let goodput_confidence =
            confidence(self.goodput_averages.len(), self.saturated_at.is_some());
        let rpm_confidence = confidence(self.rpm_averages.len(), self.rpm_stable);
        RpmDirection {
            goodput_bits_per_second: self.goodput_averages.last().copied().unwrap_or(0.0),
            goodput_confidence,
            responsiveness: self.window_probes().responsiveness(self.params.tmp),
            rpm_confidence,
            connections: self.connections,
            duration_ms,
            intervals: self.rows,
            tcp_info: None,
            server_tcp_info: None,
            limited_by: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick() -> RpmParams {
        RpmParams {
            interval_ms: 100,
            stage_limit_ms: 2_000,
            ..default_params()
        }
    }

    /// The end of interval `i` (from 1) of 100 ms.
    fn ms(i: u64) -> f64 {
        (i * 100) as f64
    }

    fn probes(tcp: f64, tls: f64, http: f64, loaded: f64, n: usize) -> Probes {
        Probes {
            tcp: vec![tcp; n],
            tls: vec![tls; n],
            http: vec![http; n],
            loaded: vec![loaded; n],
        }
    }

    #[test]
    fn trimmed_mean_drops_the_slowest_five_percent() {
        let mut s: Vec<f64> = vec![10.0; 19];
        s.push(1000.0);
        assert_eq!(trimmed_mean(&s, 0.95), Some((10.0, 19)));
        assert_eq!(trimmed_mean(&[7.0], 0.95), Some((7.0, 1)));
        assert_eq!(trimmed_mean(&[], 0.95), None);
    }

    #[test]
    fn responsiveness_is_the_drafts_formula() {
        // Foreign: (10 + 10 + 10) / 3 = 10 ms -> 6000; self 20 ms -> 3000; RPM 4500.
        let r = probes(10.0, 10.0, 10.0, 20.0, 5)
            .responsiveness(0.95)
            .unwrap();
        assert_eq!((r.foreign_rpm, r.self_rpm, r.rpm), (6000.0, 3000.0, 4500.0));
        // Plain TCP: TLS is left out, not taken as zero: (10 + 30) / 2 = 20 ms -> 3000.
        let mut p = probes(10.0, 0.0, 30.0, 20.0, 5);
        p.tls.clear();
        let r = p.responsiveness(0.95).unwrap();
        assert_eq!((r.foreign_rpm, r.tls), (3000.0, None));
        assert!(Probes::default().responsiveness(0.95).is_none());
    }

    #[test]
    fn stability_needs_mad_values_within_sdt_of_the_newest() {
        assert!(!stable(&[100.0, 100.0, 100.0], 4, 0.05));
        assert!(stable(&[100.0, 100.0, 101.0, 99.0], 4, 0.05));
        assert!(!stable(&[50.0, 100.0, 150.0, 200.0], 4, 0.05));
        assert!(!stable(&[0.0; 4], 4, 0.05));
    }

    #[test]
    fn connections_grow_until_rpm_settles_then_it_stops_with_high_confidence() {
        let mut st = DirectionRun::new(quick());
        assert_eq!(st.connections(), 1);
        let mut nexts = Vec::new();
        for i in 1..=20u64 {
            // Goodput ramps for 3 intervals, then flat; probes steady.
            let bytes = 1_000_000 * i.min(3);
            let next = st.end_interval(bytes, probes(1.0, 1.0, 1.0, 5.0, 10), ms(i));
            nexts.push(next);
            if next == Next::Stop {
                break;
            }
        }
        // Goodput settles once 4 moving averages agree (interval 6..), RPM 4 after that.
        assert!(nexts.len() >= 8 && nexts.len() < 20, "{nexts:?}");
        assert_eq!(nexts.last(), Some(&Next::Stop));
        let d = st.finish(1000);
        assert_eq!(d.goodput_confidence, Confidence::High);
        assert_eq!(d.rpm_confidence, Confidence::High);
        assert_eq!(d.connections as usize, nexts.len());
        // 3 MB a 100 ms interval = 240 Mbit/s.
        assert!((d.goodput_bits_per_second - 240e6).abs() < 1.0);
        let r = d.responsiveness.unwrap();
        assert_eq!(r.self_rpm, 12_000.0);
        assert_eq!(r.loaded.count, 40);
    }

    #[test]
    fn a_stage_cut_by_its_limit_says_low_or_medium_confidence() {
        let mut st = DirectionRun::new(RpmParams {
            stage_limit_ms: 300,
            ..quick()
        });
        let mut n = 0;
        for i in 1..=10u64 {
            n += 1;
            // Goodput never settles: it doubles every interval.
            if st.end_interval(1 << i, Probes::default(), ms(i)) == Next::Stop {
                break;
            }
        }
        assert_eq!(n, 3);
        let d = st.finish(300);
        assert_eq!(d.goodput_confidence, Confidence::Low);
        assert_eq!(d.rpm_confidence, Confidence::Low);
        assert!(d.responsiveness.is_none());
    }

    #[test]
    fn connections_stop_at_mnp_and_probes_stay_within_ptc() {
        let mut st = DirectionRun::new(RpmParams { mnp: 3, ..quick() });
        for i in 1..=6u64 {
            st.end_interval(i * 1000, Probes::default(), ms(i));
        }
        assert_eq!(st.connections(), 3);
        // A 10 Mbit/s goodput: 5 % is 62.5 kB/s, ~10 pairs of 6 kB a second, not 100.
        let mut st = DirectionRun::new(quick());
        st.end_interval(125_000, Probes::default(), 100.0);
        assert!((st.probe_rate() - 10.4).abs() < 0.1, "{}", st.probe_rate());
    }

    #[test]
    fn goodput_is_over_the_time_measured_not_the_nominal_interval() {
        // 100 ms intervals of 250 kB (20 Mbit/s) but read late: the fourth ends at 460 ms,
        // not 400, so its 310 kB came in 160 ms (15.5 Mbit/s) and the window of four moved
        // 1,060 kB in 460 ms: 18.43 Mbit/s, not the 21.2 that MAD x 100 ms would say.
        let mut st = DirectionRun::new(quick());
        for (bytes, end) in [(250_000, 100.0), (250_000, 200.0), (250_000, 300.0)] {
            st.end_interval(bytes, Probes::default(), end);
        }
        st.end_interval(310_000, Probes::default(), 460.0);
        let d = st.finish(460);
        let window = 1_060_000.0 * 8.0 / 0.46;
        assert!((d.goodput_bits_per_second - window).abs() < 1.0, "{d:?}");
        let last = &d.intervals[3];
        assert!(
            (last.goodput_bits_per_second - 15.5e6).abs() < 1.0,
            "{last:?}"
        );
        assert_eq!(last.end_s, 0.46);
    }
}
