//! Renderers: turn a result document (or the live samples of a running test) into text.
//! They compute nothing beyond unit conversion; every figure comes from `sonde-results`.

pub mod chart;
pub mod clock;
pub mod config;
pub mod csv;
pub mod events;
pub mod fleet;
pub mod hdr_log;
pub mod host;
pub mod html;
pub mod live;
mod load_plot;
pub mod look;
pub mod openmetrics;
mod published;
pub mod safe;
mod stack_plot;
pub mod summary;
mod table;
mod tcp_plot;
pub mod units;

/// The result document as pretty JSON, newline-terminated, with no control character a
/// terminal would act on (`safe::json`: the same document when read back).
pub fn json(doc: &sonde_results::Document) -> String {
    let mut s = serde_json::to_string_pretty(doc).expect("a document always serialises");
    s.push('\n');
    safe::json(&s).into_owned()
}

#[cfg(test)]
mod fixtures;
