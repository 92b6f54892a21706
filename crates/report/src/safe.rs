//! Strings a stored document or a peer supplied (commands, host names, labels, error
//! texts), made harmless where they are shown. A terminal obeys control characters (ESC
//! starts a sequence that can clear the screen, retitle the window or fake a prompt), and
//! Markdown or HTML obey markup; so every such string passes through here on its way out:
//! controls are shown as `\x1b`-style escapes, markup characters as entities or
//! backslash escapes. One module, so that every output escapes the same way.

use std::borrow::Cow;
use std::fmt::Write;

/// Characters a terminal or a renderer acts on: C0 controls, DEL, C1 controls (8-bit CSI
/// and OSC among them), and the bidirectional overrides that reorder what is shown.
fn is_control(c: char) -> bool {
    matches!(c, '\0'..='\x1f' | '\x7f'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with each character `unsafe_char` picks written visibly as `\xNN` or `\u{NNNN}`.
fn escape_controls(s: &str, unsafe_char: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(&unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut o = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !unsafe_char(c) {
            o.push(c);
        } else if (c as u32) < 0x100 {
            let _ = write!(o, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(o, "\\u{{{:x}}}", c as u32);
        }
    }
    Cow::Owned(o)
}

/// Text for a terminal: every control but newline and tab shown as an escape, so no
/// escape sequence, OSC title or carriage-return overwrite reaches the terminal.
pub fn terminal(s: &str) -> Cow<'_, str> {
    escape_controls(s, |c| is_control(c) && c != '\n' && c != '\t')
}

/// One field on one line (a table cell, a name in a sentence): newline and tab escaped
/// too, so a field cannot forge a row or a line of its own.
pub fn line(s: &str) -> Cow<'_, str> {
    escape_controls(s, is_control)
}

/// JSON for a terminal: serde_json escapes C0 itself but passes DEL, C1 and the bidi
/// overrides; those become `\u00XX` escapes, which read back as the same string.
pub fn json(s: &str) -> Cow<'_, str> {
    let bad = |c: char| is_control(c) && !matches!(c, '\n' | '\t' | '\r');
    if !s.chars().any(bad) {
        return Cow::Borrowed(s);
    }
    let mut o = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if bad(c) {
            let _ = write!(o, "\\u{:04x}", c as u32);
        } else {
            o.push(c);
        }
    }
    Cow::Owned(o)
}

/// A field in HTML text or a quoted attribute: controls escaped, markup as entities.
pub fn html(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in line(s).chars() {
        match entity(c) {
            Some(e) => o.push_str(e),
            None => o.push(c),
        }
    }
    o
}

/// The entity HTML needs for `c` in text or a quoted attribute, if any.
fn entity(c: char) -> Option<&'static str> {
    Some(match c {
        '&' => "&amp;",
        '<' => "&lt;",
        '>' => "&gt;",
        '"' => "&quot;",
        '\'' => "&#39;",
        _ => return None,
    })
}

/// A field in Markdown text or a table cell: controls escaped, HTML's special characters
/// as entities (no tag or script survives), and what Markdown acts on (backslash, table
/// pipe, backtick, emphasis, link brackets) backslash-escaped.
pub fn markdown(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in line(s).chars() {
        match c {
            '&' | '<' | '>' => o.push_str(entity(c).unwrap_or_default()),
            '\\' | '|' | '`' | '*' | '_' | '[' | ']' => {
                o.push('\\');
                o.push(c);
            }
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "\x1b]0;pwned\x07 \x1b[2J <script>alert(1)</script>|`x`";

    fn no_controls(s: &str) -> bool {
        !s.bytes().any(|b| b == 0x1b || b == 0x07)
            && !s.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c))
    }

    #[test]
    fn terminal_text_keeps_lines_and_shows_every_control() {
        assert!(matches!(terminal("plain\ttext\n"), Cow::Borrowed(_)));
        let t = terminal(HOSTILE);
        assert!(no_controls(&t), "{t:?}");
        assert!(t.starts_with("\\x1b]0;pwned\\x07 \\x1b[2J"), "{t}");
        assert_eq!(
            terminal("a\rb\u{9b}c\x7f\u{202e}"),
            "a\\x0db\\x9bc\\x7f\\u{202e}"
        );
        assert_eq!(terminal("two\nlines"), "two\nlines");
        assert_eq!(line("two\nlines\t"), "two\\x0alines\\x09");
    }

    #[test]
    fn json_stays_json_and_reads_back_the_same() {
        let v = serde_json::json!({ "host": format!("{HOSTILE}\u{9b}\x7f") });
        let text = serde_json::to_string(&v).unwrap();
        let safe = json(&text);
        assert!(no_controls(&safe) && !safe.contains('\x7f'), "{safe}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&safe).unwrap(), v);
    }

    #[test]
    fn markdown_carries_no_markup() {
        let m = markdown(HOSTILE);
        assert!(no_controls(&m), "{m}");
        assert!(!m.contains('<') && !m.contains("</script"), "{m}");
        assert!(
            m.contains("&lt;script&gt;alert(1)&lt;/script&gt;\\|\\`x\\`"),
            "{m}"
        );
        assert_eq!(
            markdown("[a](http://x) *b* c_d \\"),
            "\\[a\\](http://x) \\*b\\* c\\_d \\\\"
        );
        assert_eq!(markdown("run 7 (p99 50 µs)"), "run 7 (p99 50 µs)");
    }

    #[test]
    fn html_escapes_markup_and_controls() {
        let h = html(HOSTILE);
        assert!(no_controls(&h), "{h}");
        assert!(
            h.contains("&lt;script&gt;alert(1)&lt;/script&gt;|`x`"),
            "{h}"
        );
        assert_eq!(html("a\"b'c&"), "a&quot;b&#39;c&amp;");
    }
}
