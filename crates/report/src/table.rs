//! A report table, built once and written as HTML or Markdown, so that both carry the same
//! rows. Columns of figures are right-aligned, as published tables align them.

use crate::html::page::{esc, SAME_HOST};

#[derive(Debug, Clone, Default)]
pub struct Table {
    /// What the table shows and who measured it.
    pub caption: String,
    pub head: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// A cell that holds a figure (digits, separators, sign, a trailing unit sign).
fn is_figure(cell: &str) -> bool {
    let c = cell.trim_end_matches(" %");
    c == "n/a"
        || c == "-"
        || c == SAME_HOST
        || (!c.is_empty()
            && c.chars().any(|ch| ch.is_ascii_digit())
            && c.chars()
                .all(|ch| ch.is_ascii_digit() || ",.+-−".contains(ch)))
}

impl Table {
    pub fn new(caption: impl Into<String>, head: &[&str]) -> Table {
        Table {
            caption: caption.into(),
            head: head.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Per column: whether every cell in it is a figure.
    fn numeric(&self) -> Vec<bool> {
        (0..self.head.len())
            .map(|c| {
                self.rows
                    .iter()
                    .all(|r| r.get(c).is_some_and(|v| is_figure(v)))
            })
            .collect()
    }

    /// In a scrolling box: a wide table scrolls rather than running over the page.
    pub fn html(&self) -> String {
        let num = self.numeric();
        let class = |c: usize| if num[c] { " class=\"num\"" } else { "" };
        let mut o = String::new();
        if !self.caption.is_empty() {
            o.push_str(&format!("<p class=\"caption\">{}</p>", esc(&self.caption)));
        }
        o.push_str("<div class=\"table\"><table>");
        o.push_str("<thead><tr>");
        for (c, h) in self.head.iter().enumerate() {
            o.push_str(&format!("<th{}>{}</th>", class(c), esc(h)));
        }
        o.push_str("</tr></thead><tbody>");
        for r in &self.rows {
            o.push_str("<tr>");
            for (c, v) in r.iter().enumerate() {
                o.push_str(&format!(
                    "<td{}>{}</td>",
                    class(c.min(num.len() - 1)),
                    esc(v)
                ));
            }
            o.push_str("</tr>");
        }
        o.push_str("</tbody></table></div>");
        o
    }

    pub fn markdown(&self) -> String {
        let num = self.numeric();
        let cell = |s: &str| crate::safe::markdown(s);
        let mut o = String::new();
        if !self.caption.is_empty() {
            o.push_str(&format!("{}\n\n", cell(&self.caption)));
        }
        o.push_str(&format!(
            "| {} |\n|",
            self.head
                .iter()
                .map(|h| cell(h))
                .collect::<Vec<_>>()
                .join(" | ")
        ));
        for n in &num {
            o.push_str(if *n { " ---: |" } else { " --- |" });
        }
        o.push('\n');
        for r in &self.rows {
            o.push_str(&format!(
                "| {} |\n",
                r.iter().map(|v| cell(v)).collect::<Vec<_>>().join(" | ")
            ));
        }
        o.push('\n');
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_align_right_in_both_forms() {
        let mut t = Table::new("by the client", &["Run", "P50 µs", "Loss"]);
        t.row(vec!["run 1 (a)".into(), "79.9".into(), "0.12 %".into()]);
        t.row(vec!["run 2 | b".into(), "12,100".into(), "n/a".into()]);
        let md = t.markdown();
        assert!(
            md.contains("| Run | P50 µs | Loss |\n| --- | ---: | ---: |\n"),
            "{md}"
        );
        assert!(md.contains("run 2 \\| b"), "{md}");
        let html = t.html();
        assert!(html.contains("<th class=\"num\">P50 µs</th>"), "{html}");
        assert!(
            html.contains("<td>run 1 (a)</td><td class=\"num\">79.9</td>"),
            "{html}"
        );
    }
}
