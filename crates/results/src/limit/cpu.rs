//! CPU saturation.
