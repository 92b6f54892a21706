//! A ping or rpc run's limit.

use super::LimitedBy;
use crate::document::{Document, RrEnd};

pub(super) fn judge(_doc: &Document, _end: &RrEnd) -> Option<LimitedBy> {
    None
}
