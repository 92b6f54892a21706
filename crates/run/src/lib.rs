//! The run layer: one test between a controller and an agent (or two agents), from the handshake to the
//! result document. The controller and the agent share one control loop ([`drive`]) and
//! talk to test kinds through one seam ([`kind`]); each kind's sides talk to their data
//! plane through an engine trait, so that a side runs against a fake engine in tests.

pub mod agent;
pub mod allow;
mod apart;
pub mod build;
pub mod control;
pub mod controller;
pub mod drive;
pub mod fleet;
pub mod fleet_metrics;
pub mod hwstamps;
pub mod inspect;
pub mod iperf3;
pub mod item;
pub mod keep;
pub mod key;
pub mod kind;
pub mod lab;
pub mod load;
pub mod matrix;
pub mod measure;
pub mod mesh;
pub mod mesh_metrics;
mod meter;
pub mod metrics_http;
pub mod netns;
pub mod random;
pub mod report_look;
pub mod rpm;
pub mod schedule;
pub mod search;
pub mod serve;
pub mod service;
pub mod side;
pub mod signals;
pub mod stamp;
pub mod stored;
pub mod suite;
pub mod terminal;
pub mod tune;
pub mod watch;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_drive;
#[cfg(test)]
mod tests_pps;
#[cfg(test)]
mod tests_rr;
