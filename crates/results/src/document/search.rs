//! A zero-loss search's document, assembled once the search has ended: the kept trial's
//! document (itself assembled once, as every test's) with every trial and the result in
//! its pps section, as a load's document is assembled from its phases' documents.

use crate::document::{Document, End, PpsEnd, SearchEnd, Section};

/// The search's document: `trial`'s, the search in its section. Every trial is a pps
/// test, so `trial` holds a pps section.
pub fn assemble(trial: Document, search: SearchEnd) -> Document {
    let Document {
        schema_version,
        test,
        start,
        intervals,
        end,
    } = trial;
    let End {
        partial,
        error,
        one_host,
        section,
        limited_by,
    } = end;
    let section = match section {
        Section::Pps(p) => Section::Pps(PpsEnd {
            search: Some(search),
            ..p
        }),
        other => other,
    };
    Document {
        schema_version,
        test,
        start,
        intervals,
        end: End {
            partial,
            error,
            one_host,
            section,
            limited_by,
        },
    }
}
