//! One-way delay with a stated error (`--stages` on ping and rpc): each direction's delay
//! from both ends' kernel timestamps on their real-time clocks, corrected by the offset
//! between the clocks, with the bound that holds on it and where the bound comes from.

pub mod fit;
pub mod tally;

pub use fit::{Exchange, Limits, NoFit, Offset};
pub use tally::{OneWayRaw, OneWayTally};
pub mod resolve;

pub use resolve::{claim, resolve, BoundFrom, Claim, ClockEnd, OneWay};

/// A span of ns for a sentence: µs below a millisecond, ms below a second, else s.
pub(crate) fn us(ns: f64) -> String {
    let a = ns.abs();
    if a < 1e6 {
        format!("{:.1} us", ns / 1e3)
    } else if a < 1e9 {
        format!("{:.3} ms", ns / 1e6)
    } else {
        format!("{:.3} s", ns / 1e9)
    }
}

#[cfg(test)]
mod tests_resolve;
