//! The responsiveness spec (`sonde rpm URL`): the draft's method against any test endpoint
//! (Apple's, Cloudflare's, `serve --rpm`), no agent at the far end.

use serde::{Deserialize, Serialize};

use super::{refuse, Execution, SpecError, Timing};
use crate::rpm::RpmParams;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpmSpec {
    /// The configuration's URL as given.
    pub url: String,
    /// The server's certificate accepted without verifying it.
    #[serde(default)]
    pub insecure: bool,
    /// The draft's parameters.
    pub params: RpmParams,
    pub download: bool,
    pub upload: bool,
    #[serde(flatten)]
    pub timing: Timing,
    #[serde(flatten)]
    pub execution: Execution,
}

impl RpmSpec {
    /// A spec of `params`, its timing the stages' limits (one interval each).
    pub fn new(
        url: String,
        insecure: bool,
        params: RpmParams,
        download: bool,
        upload: bool,
    ) -> RpmSpec {
        let stages = u64::from(download) + u64::from(upload);
        let timing = Timing {
            duration_ms: params.stage_limit_ms.saturating_mul(stages),
            warmup_ms: 0,
            cooldown_ms: 0,
            interval_ms: params.interval_ms,
        };
        RpmSpec {
            url,
            insecure,
            params,
            download,
            upload,
            timing,
            execution: Execution::default(),
        }
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        let p = &self.params;
        if !(self.download || self.upload) {
            return refuse(
                "--download-only",
                "and --upload-only leave nothing to measure",
            );
        }
        if p.interval_ms < 50 || p.interval_ms > 60_000 {
            return refuse(
                "--interval",
                format!("{} ms: from 50 ms to 60 s", p.interval_ms),
            );
        }
        if p.stage_limit_ms < p.interval_ms || p.stage_limit_ms > 600_000 {
            return refuse("--stage-limit", "from one --interval to 600 s");
        }
        if !(1..=64).contains(&p.mad) {
            return refuse("--mad", "from 1 to 64");
        }
        if !(1..=64).contains(&p.mnp) || p.inp > p.mnp {
            return refuse("--max-connections", "from 1 to 64");
        }
        if !(1..=100).contains(&p.mps) {
            return refuse("--max-probes", "from 1 to 100 a second");
        }
        let share = |v: f64| v.is_finite() && v > 0.0 && v <= 1.0;
        if !(share(p.tmp) && share(p.sdt) && share(p.ptc)) {
            return refuse("--interval", "TMP, SDT and PTC are shares from 0 to 1");
        }
        Ok(())
    }
}
