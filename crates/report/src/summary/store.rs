//! Summaries that span kinds: the store's list of runs and the comparison of two groups.

use sonde_results::Document;

use super::common::table;

/// The widest `sonde results list` prints: a terminal's 100 columns.
pub const LIST_WIDTH: usize = 100;

/// `s` cut to `n` characters, `…` marking the cut.
fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// A command line without its program's directory (`sonde ping …`).
fn command_line(c: &str) -> String {
    let (program, rest) = c.split_once(' ').unwrap_or((c, ""));
    let program = program.rsplit('/').next().unwrap_or(program);
    format!("{program} {rest}").trim_end().to_string()
}

/// `sonde results list`: one row per stored run, in 100 columns: the time to the second,
/// the command shortened (`sonde results show ID` has it whole).
pub fn runs(runs: &[(i64, Option<String>, &Document)]) -> String {
    let mut t = table(vec![
        "run",
        "label",
        "test",
        "started (UTC)",
        "result",
        "status",
        "command",
    ]);
    let mut rows = Vec::new();
    for (id, label, d) in runs {
        let started = d.start.started_at.replace('T', " ");
        // Stored strings, one line each: no control reaches the terminal, no row is forged.
        let line = |s: &str| crate::safe::line(s).into_owned();
        rows.push(vec![
            id.to_string(),
            shorten(&line(label.as_deref().unwrap_or("")), 12),
            d.test.to_string(),
            line(&started).chars().take(19).collect(),
            (crate::summary::row(d.test).listed)(&d.end),
            if d.end.partial { "partial" } else { "ok" }.into(),
            line(&command_line(&d.start.command)),
        ]);
    }
    // Borders take 3 columns per cell and one more; the command gets what is left.
    let used: usize = (0..6)
        .map(|c| {
            rows.iter()
                .map(|r: &Vec<String>| r[c].chars().count())
                .chain([t.header().map_or(0, |h| {
                    h.cell_iter()
                        .nth(c)
                        .map_or(0, |x| x.content().chars().count())
                })])
                .max()
                .unwrap_or(0)
        })
        .sum();
    let room = LIST_WIDTH.saturating_sub(used + 3 * 7 + 1).max(10);
    for mut r in rows {
        r[6] = shorten(&r[6], room);
        t.add_row(r);
    }
    format!("{t}\n")
}

/// `sonde compare`: one row per figure, saying how each side's figure was made, then
/// what limited each group when both had a verdict (`receiver_window -> network`).
pub fn comparison(
    a: &str,
    b: &str,
    cmp: &[sonde_results::compare::Comparison],
    limits: Option<&sonde_results::compare::LimitShift>,
) -> String {
    use crate::units::sig3;
    let mut t = table(vec![
        "metric".to_string(),
        crate::safe::line(a).into_owned(),
        crate::safe::line(b).into_owned(),
        "change".into(),
        "95 % interval".into(),
        "verdict".into(),
    ]);
    for c in cmp {
        t.add_row(vec![
            format!(
                "{}, {} ({} is better)",
                c.title,
                c.unit,
                if c.higher_is_better {
                    "higher"
                } else {
                    "lower"
                }
            ),
            format!(
                "{} ({}, n={})",
                sig3(c.value_a),
                c.aggregate.describe(),
                c.runs_a
            ),
            format!(
                "{} ({}, n={})",
                sig3(c.value_b),
                c.aggregate.describe(),
                c.runs_b
            ),
            format!("{:+.1} %", c.change_percent),
            format!(
                "[{:+.1} %, {:+.1} %]",
                c.ci95_low_percent, c.ci95_high_percent
            ),
            match c.verdict {
                sonde_results::compare::Verdict::Better => "better".into(),
                sonde_results::compare::Verdict::Worse => "WORSE".into(),
                sonde_results::compare::Verdict::NoSignificantChange => {
                    "no significant change".into()
                }
            },
        ]);
    }
    let mut out = format!("{t}\n");
    if let Some(l) = limits {
        out.push_str(&format!("limited by: {}\n", l.text()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::compare::{GroupLimit, LimitShift};
    use sonde_results::limit::Limit;

    #[test]
    fn the_comparison_says_when_the_limit_moved() {
        let g = |verdict| GroupLimit {
            verdict,
            runs: 3,
            of: 3,
        };
        let moved = LimitShift {
            metric: "limited_by",
            a: g(Limit::ReceiverWindow),
            b: g(Limit::Network),
            moved: true,
        };
        let text = comparison("a", "b", &[], Some(&moved));
        assert!(
            text.ends_with("\nlimited by: receiver_window -> network\n"),
            "{text}"
        );
        assert!(!comparison("a", "b", &[], None).contains("limited by"));
    }
}
