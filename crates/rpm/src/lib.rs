//! Responsiveness under working conditions (IETF IPPM draft-ietf-ippm-responsiveness), both
//! ways: a test server any `networkQuality`-style client can use (`sonde serve --rpm`) and a
//! client for any server that follows the draft (`sonde rpm URL`). The method and the
//! configuration reader are sans-IO ([`method`], [`config`]); the server and the client are
//! thin loops over hyper's HTTP/2 and rustls (ring), each on one current-thread tokio
//! runtime of its own thread, never shared with the rest of sonde.

pub mod config;
pub mod method;

#[cfg(feature = "net")]
pub mod client;
#[cfg(feature = "net")]
pub mod far;
#[cfg(feature = "net")]
pub mod lowat;
#[cfg(feature = "net")]
pub mod server;
#[cfg(feature = "net")]
pub mod tls;
