//! The run layer: one test between a controller and an agent, from the handshake to the
//! result document.

pub mod agent;
pub mod control;
pub mod controller;
pub mod pps_side;
pub mod rr_side;
pub mod schedule;
pub mod search;
pub mod side;
pub mod signals;
pub mod stream_side;
