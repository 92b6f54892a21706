//! An agent's own labels (`sonde serve --label zone=a`): the rules a label must meet, shared
//! by the agent's command line (which refuses a bad one) and the controller (which drops
//! what an agent announces beyond them: the agent is untrusted input).
//!
//! The rules are Prometheus's for a label name, minus the names the exporter sets itself,
//! and bounds that keep a document and a metrics line small.

use std::collections::BTreeMap;

/// Most labels one agent carries.
pub const MAX_LABELS: usize = 32;
/// Longest label value, and longest label name, in bytes.
pub const MAX_LABEL_BYTES: usize = 128;
/// Label names the metrics exporter sets itself; an agent's label may not shadow them.
pub const RESERVED_LABELS: &[&str] = &[
    "source",
    "destination",
    "test",
    "status",
    "quantile",
    "verdict",
    "fleet",
];

/// An agent's labels, by name.
pub type Labels = BTreeMap<String, String>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("label name must match [a-zA-Z_][a-zA-Z0-9_]* (a Prometheus label name)")]
    BadName,
    #[error("label names starting with __ are reserved by Prometheus")]
    DoubleUnderscore,
    #[error("label name is one sonde's metrics set themselves ({})", RESERVED_LABELS.join(", "))]
    Reserved,
    #[error("label name is longer than {MAX_LABEL_BYTES} bytes")]
    LongName,
    #[error("label value is empty")]
    EmptyValue,
    #[error("label value is {0} bytes, more than {MAX_LABEL_BYTES}")]
    LongValue(usize),
    #[error("label value holds a control character")]
    ControlChar,
    #[error("label value holds U+{0:04X}, an invisible format or separator character (a bidirectional override or a zero-width joiner shows a value as another)")]
    FormatChar(u32),
}

/// Unicode's format characters (general category Cf, Unicode 15.1) and its line and
/// paragraph separators (Zl, Zp): invisible, or turning what follows around (U+202E), so
/// that a value reads as another on a dashboard.
const FORMAT_CHARS: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x2028, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

fn is_format(c: char) -> bool {
    let c = c as u32;
    FORMAT_CHARS.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
}

/// Whether `name=value` is a label an agent may carry.
pub fn check(name: &str, value: &str) -> Result<(), LabelError> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(LabelError::BadName);
    }
    if name.len() > MAX_LABEL_BYTES {
        return Err(LabelError::LongName);
    }
    if name.starts_with("__") {
        return Err(LabelError::DoubleUnderscore);
    }
    if RESERVED_LABELS.contains(&name) {
        return Err(LabelError::Reserved);
    }
    if value.is_empty() {
        return Err(LabelError::EmptyValue);
    }
    if value.len() > MAX_LABEL_BYTES {
        return Err(LabelError::LongValue(value.len()));
    }
    if value.chars().any(char::is_control) {
        return Err(LabelError::ControlChar);
    }
    if let Some(c) = value.chars().find(|&c| is_format(c)) {
        return Err(LabelError::FormatChar(c as u32));
    }
    Ok(())
}

/// What an agent announced, cut to the rules: the first [`MAX_LABELS`] good labels (by
/// name), and a note saying what was dropped and why, if anything was.
pub fn bound(announced: Labels) -> (Labels, Option<String>) {
    let total = announced.len();
    let mut kept = Labels::new();
    let mut bad = 0usize;
    let mut first_reason = None;
    for (name, value) in announced {
        if let Err(e) = check(&name, &value) {
            bad += 1;
            first_reason.get_or_insert(e);
        } else if kept.len() < MAX_LABELS {
            kept.insert(name, value);
        }
    }
    let over = total - bad - kept.len();
    if bad == 0 && over == 0 {
        return (kept, None);
    }
    let mut note = format!("the agent announced {total} label(s); kept {}", kept.len());
    if over > 0 {
        note.push_str(&format!(", dropped {over} beyond the first {MAX_LABELS}"));
    }
    if let Some(why) = first_reason {
        note.push_str(&format!(
            ", dropped {bad} that break the rules (first: {why})"
        ));
    }
    (kept, Some(note))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_follow_the_rules() {
        assert_eq!(check("zone", "a"), Ok(()));
        assert_eq!(check("_node_2", "n-1.example"), Ok(()));
        assert_eq!(check("2zone", "a"), Err(LabelError::BadName));
        assert_eq!(check("zo-ne", "a"), Err(LabelError::BadName));
        assert_eq!(check("", "a"), Err(LabelError::BadName));
        assert_eq!(check("__name", "a"), Err(LabelError::DoubleUnderscore));
        for r in RESERVED_LABELS {
            assert_eq!(check(r, "a"), Err(LabelError::Reserved));
        }
        let long = "v".repeat(MAX_LABEL_BYTES);
        assert_eq!(check("zone", &long), Ok(()));
        assert_eq!(
            check("zone", &format!("{long}v")),
            Err(LabelError::LongValue(MAX_LABEL_BYTES + 1))
        );
        assert_eq!(check(&format!("z{long}"), "a"), Err(LabelError::LongName));
        assert_eq!(check("zone", ""), Err(LabelError::EmptyValue));
        assert_eq!(check("zone", "a\nb"), Err(LabelError::ControlChar));
    }

    /// The red team's U+202E (right-to-left override) and U+200D (zero-width joiner), and
    /// the rest of category Cf, are refused by code point; letters of any script are not.
    #[test]
    fn invisible_format_characters_are_refused_by_code_point() {
        for (value, c) in [
            ("rack\u{202E}1r", 0x202E),
            ("r\u{200D}1", 0x200D),
            ("\u{FEFF}a", 0xFEFF),
            ("a\u{2066}b", 0x2066),
            ("a\u{00AD}", 0x00AD),
            ("a\u{E0041}", 0xE0041),
            ("a\u{2028}b", 0x2028),
        ] {
            assert_eq!(
                check("zone", value),
                Err(LabelError::FormatChar(c)),
                "{value:?}"
            );
        }
        let e = check("rack", "a\u{202E}").unwrap_err().to_string();
        assert!(e.contains("U+202E") && e.contains("format"), "{e}");
        for fine in ["zürich", "東京-1", "α", "r-1.example", "a b"] {
            assert_eq!(check("zone", fine), Ok(()), "{fine}");
        }
    }

    #[test]
    fn bound_keeps_good_labels_and_says_what_it_dropped() {
        let good: Labels = [("zone".into(), "a".into())].into();
        assert_eq!(bound(good.clone()), (good, None));
        let mut many: Labels = (0..MAX_LABELS + 5)
            .map(|i| (format!("l{i:03}"), "v".into()))
            .collect();
        many.insert("test".into(), "x".into());
        let (kept, note) = bound(many);
        assert_eq!(kept.len(), MAX_LABELS);
        let note = note.unwrap();
        assert!(note.contains("dropped 5 beyond"), "{note}");
        assert!(note.contains("dropped 1 that break"), "{note}");
    }
}
