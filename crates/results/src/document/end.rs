//! `end`: what every kind's document shares (cut short or not, why, a host both ends
//! shared) and one typed section per kind. The sections are flattened, so every JSON key
//! stays where schema version 1 put it; reading one back needs the document's `test` to
//! know which section to expect: the kind's row (`document::row`) reads it
//! ([`End::read`]). Each kind's [`Section`] is declared with its row, in `document`.

use serde::{Deserialize, Serialize, Serializer};

use super::load::LoadEnd;
use super::pps::PpsEnd;
use super::rr::RrEnd;
use super::stamp::StampEnd;
use super::stream::StreamEnd;
use super::watch::WatchEnd;
use super::{row, Section};
use crate::side::CpuUsage;
use crate::spec::TestName;
use crate::verdict::LimitedBy;

#[derive(Debug, Clone, PartialEq)]
pub struct End {
    /// The test was cut short; `error` then says why.
    pub partial: bool,
    pub error: Option<String>,
    /// Both ends ran on one host (same kernel boot id): its CPU figures are here, once,
    /// and absent from the sections' sides, which keep their own process CPU.
    pub one_host: Option<OneHost>,
    pub section: Section,
    /// What limited the run (stream, pps, rpc, ping; rpm: one direction's, named), judged
    /// from the figures above.
    pub limited_by: Option<LimitedBy>,
}

/// The host both ends shared, counted once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneHost {
    pub hostname: String,
    /// The host's CPU over the controller's window.
    pub cpu: Option<CpuUsage>,
    /// Stream tests: host busy cycles per byte received, once for both ends.
    pub cycles_per_byte: Option<f64>,
}

impl End {
    pub fn new(partial: bool, error: Option<String>, section: Section) -> End {
        End {
            partial,
            error,
            one_host: None,
            section,
            limited_by: None,
        }
    }

    pub fn stream(&self) -> Option<&StreamEnd> {
        match &self.section {
            Section::Stream(s) => Some(s),
            _ => None,
        }
    }

    pub fn rr(&self) -> Option<&RrEnd> {
        match &self.section {
            Section::Rr(r) => Some(r),
            _ => None,
        }
    }

    pub fn pps(&self) -> Option<&PpsEnd> {
        match &self.section {
            Section::Pps(p) => Some(p),
            _ => None,
        }
    }

    pub fn load(&self) -> Option<&LoadEnd> {
        match &self.section {
            Section::Load { load } => Some(load),
            _ => None,
        }
    }

    pub fn watch(&self) -> Option<&WatchEnd> {
        match &self.section {
            Section::Watch { watch } => Some(watch),
            _ => None,
        }
    }

    pub fn rpm(&self) -> Option<&crate::rpm::RpmEnd> {
        match &self.section {
            Section::Rpm { rpm } => Some(rpm),
            _ => None,
        }
    }

    pub fn stamp(&self) -> Option<&StampEnd> {
        match &self.section {
            Section::Stamp { stamp } => Some(stamp),
            _ => None,
        }
    }

    /// The one host's CPU figures, moved out of the sides (`take_host_cpu`, the kind's
    /// row's: it returns the stream sender's cycles per byte, which then describe that
    /// host), so that no reader adds the same host twice.
    pub(super) fn count_one_host(
        &mut self,
        hostname: &str,
        cpu: Option<CpuUsage>,
        take_host_cpu: fn(&mut Section) -> Option<f64>,
    ) {
        let cycles_per_byte = take_host_cpu(&mut self.section);
        self.one_host = Some(OneHost {
            hostname: hostname.to_string(),
            cpu,
            cycles_per_byte,
        });
    }

    /// The `end` of a document of `test`, as JSON wrote it.
    pub fn read(test: TestName, json: serde_json::Value) -> serde_json::Result<End> {
        End::read_with(json, row(test).read_end)
    }

    /// The `end` of a document as JSON wrote it, its section read by `section` (the
    /// kind's row's reader: `End::read`).
    fn read_with(
        json: serde_json::Value,
        section: fn(serde_json::Value) -> serde_json::Result<Section>,
    ) -> serde_json::Result<End> {
        let w: Wire = serde_json::from_value(json)?;
        Ok(End {
            partial: w.partial,
            error: w.error,
            one_host: w.one_host,
            section: section(serde_json::Value::Object(w.section))?,
            limited_by: w.limited_by,
        })
    }
}

/// `end` as written: the shared keys, and the section's left for the kind's reader.
#[derive(Deserialize)]
struct Wire {
    partial: bool,
    error: Option<String>,
    #[serde(default)]
    one_host: Option<OneHost>,
    #[serde(default)]
    limited_by: Option<LimitedBy>,
    #[serde(flatten)]
    section: serde_json::Map<String, serde_json::Value>,
}

impl Serialize for End {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let directions = matches!(self.section, Section::Stream(_) | Section::Pps(_));
        Out {
            partial: self.partial,
            error: self.error.as_deref(),
            section: &self.section,
            vacant: Vacant {
                sender: (!directions).then_some(()),
                receiver: (!directions).then_some(()),
                // A stream test's, or a bidirectional pps test's, is its own.
                reverse: (!matches!(&self.section, Section::Stream(_))
                    && !matches!(&self.section, Section::Pps(p) if p.reverse.is_some()))
                .then_some(()),
            },
            one_host: self.one_host.as_ref(),
            limited_by: self.limited_by.as_ref(),
        }
        .serialize(s)
    }
}

#[derive(Serialize)]
struct Out<'a> {
    partial: bool,
    error: Option<&'a str>,
    #[serde(flatten)]
    section: &'a Section,
    #[serde(flatten)]
    vacant: Vacant,
    #[serde(skip_serializing_if = "Option::is_none")]
    one_host: Option<&'a OneHost>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limited_by: Option<&'a LimitedBy>,
}

/// `end.sender`, `end.receiver` and `end.reverse` as `null` where a kind's section has
/// none: schema version 1 wrote them in every document, so scripts may test them
/// (`Some(())` is written as `null`).
#[derive(Serialize)]
struct Vacant {
    #[serde(skip_serializing_if = "Option::is_none")]
    sender: Option<()>,
    #[serde(skip_serializing_if = "Option::is_none")]
    receiver: Option<()>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reverse: Option<()>,
}
