//! One-way delay with a stated error (`--stages` on ping and rpc): each direction's delay
//! from both ends' kernel timestamps on their real-time clocks, corrected by the offset
//! between the clocks, with the bound that holds on it and where the bound comes from.

pub mod fit;

pub use fit::{Exchange, Limits, NoFit, Offset};
