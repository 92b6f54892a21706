//! A stream run's limit.

use super::LimitedBy;
use crate::document::{Document, StreamEnd};

pub(super) fn judge(_doc: &Document, _end: &StreamEnd) -> Option<LimitedBy> {
    None
}
