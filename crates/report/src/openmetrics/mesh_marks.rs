//! The mesh's marks families (`serve --mesh-dscp`/`--mesh-ecn`): what each direction's
//! answered probes became, as the samples of a peer's direction; `mesh` writes them, only
//! when some peer's probes are marked.
//!
//! `sonde_mesh_marks_packets_total` names each DSCP by its number, as it did before class
//! names were written: its series keep their labels (issue 53: a series whose label set
//! changes is a new series to Prometheus, and a rule or join written against the old one
//! stops matching). `sonde_mesh_dscp_fate_packets_total` carries the same counts with
//! each DSCP's class name beside its number (`ef`, `af41`, `cs0`, as `--dscp` takes them;
//! the number where the class has no name) and what the path did (`kept`, `bleached`,
//! `remarked`): the rules select on that, since PromQL cannot compare two labels.

use std::collections::BTreeMap;

use sonde_results::marks::{DirectionFate, Dscp};

/// One sample of a direction: its labels after `direction`, and its count.
pub(super) type Sample = (Vec<(&'static str, String)>, u64);

/// A counter family of the marks: its name (without `_total`), help, and a direction's
/// samples.
pub(super) type Family = (
    &'static str,
    &'static str,
    fn(&DirectionFate) -> Vec<Sample>,
);

/// The families, in the order they are written.
pub(super) fn families() -> [Family; 4] {
    [
        ("sonde_mesh_marks_packets", "Answered probes by direction and the DSCP they were sent and arrived with: forward as the peer received them, reverse as its answers came back", by_number),
        ("sonde_mesh_dscp_fate_packets", "Answered probes by direction, the DSCP and class name they were sent and arrived with (the number where the class has none), and the fate: kept, bleached (to 0) or remarked", by_name),
        ("sonde_mesh_ect_packets", "Answered probes sent ECN-capable (ECT(0) or ECT(1)), by direction: what a CE fraction is of", ect),
        ("sonde_mesh_ce_packets", "Probes sent ECN-capable that arrived marked CE (congestion experienced), by direction", ce),
    ]
}

/// A direction's answered probes by the (sent, arrived) DSCP, whatever their ECN.
fn by_dscp(d: &DirectionFate) -> BTreeMap<(Dscp, Dscp), u64> {
    let mut by = BTreeMap::new();
    for t in &d.transitions {
        *by.entry((t.sent_dscp, t.arrived_dscp)).or_default() += t.packets;
    }
    by
}

fn by_number(d: &DirectionFate) -> Vec<Sample> {
    let each = |((sent, arrived), n): ((Dscp, Dscp), u64)| {
        let labels = vec![
            ("sent_dscp", sent.value().to_string()),
            ("arrived_dscp", arrived.value().to_string()),
        ];
        (labels, n)
    };
    by_dscp(d).into_iter().map(each).collect()
}

fn by_name(d: &DirectionFate) -> Vec<Sample> {
    let each = |((sent, arrived), n): ((Dscp, Dscp), u64)| {
        let labels = vec![
            ("sent_dscp", sent.value().to_string()),
            ("sent_class", class(sent)),
            ("arrived_dscp", arrived.value().to_string()),
            ("arrived_class", class(arrived)),
            ("fate", fate(sent, arrived).to_string()),
        ];
        (labels, n)
    };
    by_dscp(d).into_iter().map(each).collect()
}

fn ect(d: &DirectionFate) -> Vec<Sample> {
    vec![(Vec::new(), d.ect_sent)]
}

fn ce(d: &DirectionFate) -> Vec<Sample> {
    vec![(Vec::new(), d.ce)]
}

/// A DSCP's class name as `--dscp` takes it (`ef`, `af41`, `cs0` for 0), or its number.
fn class(d: Dscp) -> String {
    d.name()
        .map_or_else(|| d.value().to_string(), str::to_string)
}

/// What the path did to a DSCP, as a document counts it (`DirectionFate::record_n`).
fn fate(sent: Dscp, arrived: Dscp) -> &'static str {
    if sent == arrived {
        "kept"
    } else if arrived == Dscp::DEFAULT {
        "bleached"
    } else {
        "remarked"
    }
}
