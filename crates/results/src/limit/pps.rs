//! A pps run's limit.

use super::LimitedBy;
use crate::document::{Document, PpsEnd};

pub(super) fn judge(_doc: &Document, _end: &PpsEnd) -> Option<LimitedBy> {
    None
}
