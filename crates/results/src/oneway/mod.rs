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

impl OneWay {
    /// `forward 41.2 ± 3.1 us, reverse 38.9 ± 3.1 us (bound from the exchange; clocks not
    /// synchronised)` at the median, or the clock fault.
    pub fn line(&self) -> String {
        if let Some(f) = &self.clock_fault {
            return format!("one-way: clock fault: {f}");
        }
        let (Some(f), Some(r), Some(b), Some(from)) = (
            &self.forward_ns,
            &self.reverse_ns,
            self.bound_ns,
            self.bound_from,
        ) else {
            return "one-way: no message had both ends' stamps".into();
        };
        let mut why = from.words().to_string();
        if let Some(c) = self.clocks.as_ref().filter(|_| from != BoundFrom::OneClock) {
            why = format!("{why}; {c}");
        }
        if self.clocks_disagree.is_some() {
            why.push_str("; the clocks disagree beyond their bounds");
        }
        format!(
            "one-way P50: forward {} ± {}, reverse {} ± {} ({why})",
            us(f.p50 as f64),
            us(b),
            us(r.p50 as f64),
            us(b)
        )
    }
}
#[cfg(test)]
mod tests_resolve;
