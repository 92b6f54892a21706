//! Whether the limit moved between two groups of runs: a change in throughput reads
//! differently when the receiver's window held A and the network holds B. Each group is
//! named by the verdict most of its runs carry, with how many carry it.

use serde::Serialize;

use crate::document::Document;
use crate::verdict::Limit;

/// A group's verdict: the one most of its runs carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GroupLimit {
    pub verdict: Limit,
    /// Runs of the group with this verdict.
    pub runs: usize,
    /// Runs in the group.
    pub of: usize,
}

/// What limited A and what limits B: one row of `sonde compare --json`, after the
/// figures' rows, under the metric name `limited_by`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitShift {
    pub metric: &'static str,
    pub a: GroupLimit,
    pub b: GroupLimit,
    /// The two verdicts differ.
    pub moved: bool,
}

impl LimitShift {
    /// `receiver_window -> network`, or `network in both` once when the groups share it;
    /// a group whose runs disagree says how many of them carry its verdict.
    pub fn text(&self) -> String {
        let some = |g: &GroupLimit| (g.runs < g.of).then(|| format!("{} of {} runs", g.runs, g.of));
        if self.moved {
            let side = |g: &GroupLimit| match some(g) {
                Some(n) => format!("{} ({n})", g.verdict),
                None => g.verdict.to_string(),
            };
            return format!("{} -> {}", side(&self.a), side(&self.b));
        }
        let notes: Vec<String> = [("A", &self.a), ("B", &self.b)]
            .into_iter()
            .filter_map(|(name, g)| some(g).map(|n| format!("{name}: {n}")))
            .collect();
        let mut s = format!("{} in both", self.a.verdict);
        if !notes.is_empty() {
            s += &format!(" ({})", notes.join(", "));
        }
        s
    }
}

/// The verdict most of `docs` carry (the first seen on a tie); `None` when none has one.
fn group(docs: &[&Document]) -> Option<GroupLimit> {
    let mut counts: Vec<(Limit, usize)> = Vec::new();
    for v in docs.iter().filter_map(|d| d.end.limited_by.as_ref()) {
        match counts.iter_mut().find(|(l, _)| *l == v.verdict) {
            Some((_, n)) => *n += 1,
            None => counts.push((v.verdict, 1)),
        }
    }
    // `max_by_key` keeps the last of equals; reversed, the first seen wins a tie.
    let (verdict, runs) = counts.into_iter().rev().max_by_key(|(_, n)| *n)?;
    Some(GroupLimit {
        verdict,
        runs,
        of: docs.len(),
    })
}

/// A's and B's verdicts, when both groups have one.
pub fn limit_shift(a: &[&Document], b: &[&Document]) -> Option<LimitShift> {
    let (a, b) = (group(a)?, group(b)?);
    Some(LimitShift {
        metric: "limited_by",
        moved: a.verdict != b.verdict,
        a,
        b,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::LimitedBy;

    fn run(verdict: Option<Limit>) -> Document {
        let mut d: Document =
            serde_json::from_str(include_str!("../../tests/fixtures/v1-stream.json")).unwrap();
        d.end.limited_by = verdict.map(|verdict| LimitedBy {
            verdict,
            strength: 0.9,
            evidence: Vec::new(),
            runner_up: None,
        });
        d
    }

    #[test]
    fn the_move_is_named_and_a_shared_verdict_once() {
        let (w, n) = (run(Some(Limit::ReceiverWindow)), run(Some(Limit::Network)));
        let s = limit_shift(&[&w, &w], &[&n, &n]).unwrap();
        assert!(s.moved);
        assert_eq!(s.text(), "receiver_window -> network");
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["metric"], "limited_by");
        assert_eq!(json["a"]["verdict"], "receiver_window");
        assert_eq!(json["b"]["verdict"], "network");
        let same = limit_shift(&[&n], &[&n, &n]).unwrap();
        assert!(!same.moved);
        assert_eq!(same.text(), "network in both");
        let none = run(None);
        let mixed = limit_shift(&[&n, &none], &[&n]).unwrap();
        assert_eq!(mixed.text(), "network in both (A: 1 of 2 runs)");
    }

    #[test]
    fn a_group_is_named_by_its_majority_and_needs_a_verdict() {
        let (w, n, none) = (
            run(Some(Limit::ReceiverWindow)),
            run(Some(Limit::Network)),
            run(None),
        );
        let s = limit_shift(&[&w, &n, &n, &none], &[&w]).unwrap();
        assert_eq!((s.a.verdict, s.a.runs, s.a.of), (Limit::Network, 2, 4));
        assert_eq!(s.text(), "network (2 of 4 runs) -> receiver_window");
        assert!(limit_shift(&[&none], &[&w]).is_none());
        assert!(limit_shift(&[&w], &[]).is_none());
    }
}
