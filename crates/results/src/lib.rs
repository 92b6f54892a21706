//! The result model of netsonde: what a test asks for ([`spec`]), what one side of a test
//! measured ([`side`]), and the versioned result document that merges both sides
//! ([`document`]). Plain data and arithmetic only: no I/O, no clocks, no sockets.

pub mod clock;
pub mod compare;
pub mod document;
pub mod inventory;
pub mod latency;
pub mod limit;
pub mod marks;
pub mod mesh;
pub mod oneway;
mod pooled;
pub mod rpm;
pub mod side;
pub mod spec;
pub mod stages;
pub mod stamps;
pub mod stats;
pub mod tcp;
pub mod verdict;

pub use document::{Document, SCHEMA_VERSION};
pub use latency::LatencySummary;
pub use side::{
    BlockedSends, Bypass, ConnectionResult, ControlThread, CoreUsage, CpuBreakdown, CpuLatency,
    CpuUsage, DirectionResult, HostInfo, IntervalSample, NicCounters, PortCounters, PpsResult,
    PpsSample, QdiscCounters, QueueCounters, Role, RrResult, RrSample, SampleSection, SideResult,
    SideSection, StreamResult, StreamSample, Transfer, WorkerSched,
};
pub use spec::{
    Direction, DpdkSpec, Engine, Execution, LoadSpec, Phase, PollMode, PpsSpec, RrSpec, SpecError,
    Stall, StampSpec, StreamSpec, TestSpec, Timing, Transport, WatchSpec,
};
