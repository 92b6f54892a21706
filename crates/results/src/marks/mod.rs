//! A packet's marks: the DSCP (RFC 2474, 6 bits) and ECN (RFC 3168, 2 bits) of its IPv4
//! TOS or IPv6 Traffic Class byte. What a test asks to set (`--dscp`, `--ecn`,
//! `--control-dscp`: [`Marks`], part of every spec's `Execution`) and, in [`fate`], what
//! the path did to them per direction: sent as X, arrived as Y. Pure data: the engine sets
//! and reads the byte, this module only names and counts it.

pub mod fate;

use serde::{Deserialize, Serialize};

pub use fate::{DirectionFate, Fate, Transition};

/// Largest DSCP: six bits.
pub const MAX_DSCP: u8 = 63;

/// DSCP names and numbers: class selectors (RFC 2474), assured forwarding (RFC 2597),
/// expedited forwarding (RFC 3246), voice admit (RFC 5865), lower effort (RFC 8622).
const NAMED: [(&str, u8); 24] = [
    ("cs0", 0),
    ("cs1", 8),
    ("cs2", 16),
    ("cs3", 24),
    ("cs4", 32),
    ("cs5", 40),
    ("cs6", 48),
    ("cs7", 56),
    ("af11", 10),
    ("af12", 12),
    ("af13", 14),
    ("af21", 18),
    ("af22", 20),
    ("af23", 22),
    ("af31", 26),
    ("af32", 28),
    ("af33", 30),
    ("af41", 34),
    ("af42", 36),
    ("af43", 38),
    ("ef", 46),
    ("va", 44),
    ("le", 1),
    ("be", 0),
];

/// A DSCP codepoint, 0 to 63.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub struct Dscp(u8);

impl Dscp {
    pub const DEFAULT: Dscp = Dscp(0);

    pub fn new(value: u8) -> Option<Dscp> {
        (value <= MAX_DSCP).then_some(Dscp(value))
    }

    pub fn value(self) -> u8 {
        self.0
    }

    /// The DSCP of a TOS / Traffic Class byte.
    pub fn of_tos(tos: u8) -> Dscp {
        Dscp(tos >> 2)
    }

    /// Its class name when it has one (`ef`, `af41`, `cs0` for 0).
    pub fn name(self) -> Option<&'static str> {
        NAMED.iter().find(|(_, v)| *v == self.0).map(|(n, _)| *n)
    }

    /// `46 (EF)`, or the number alone (0 too: "bleached to 0" says it).
    pub fn words(self) -> String {
        match self.name().filter(|_| self.0 != 0) {
            Some(n) => format!("{} ({})", self.0, n.to_uppercase()),
            None => self.0.to_string(),
        }
    }

    /// A class name (any case: `EF`, `af41`, `CS6`, `VA`, `LE`) or a number 0-63 (decimal,
    /// or hex with `0x`); the error says what is accepted.
    pub fn parse(text: &str) -> Result<Dscp, MarkError> {
        let t = text.trim().to_ascii_lowercase();
        if let Some((_, v)) = NAMED.iter().find(|(n, _)| *n == t) {
            return Ok(Dscp(*v));
        }
        let number = match t.strip_prefix("0x") {
            Some(hex) => u8::from_str_radix(hex, 16).ok(),
            None => t.parse::<u8>().ok(),
        };
        number
            .and_then(Dscp::new)
            .ok_or_else(|| MarkError::NotDscp(text.to_string()))
    }
}

impl TryFrom<u8> for Dscp {
    type Error = MarkError;
    fn try_from(v: u8) -> Result<Self, Self::Error> {
        Dscp::new(v).ok_or(MarkError::DscpAbove(v))
    }
}

/// A DSCP or ECN mark that is not one (`--dscp`, `--ecn`, a document's number).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkError {
    #[error(
        "'{0}' is neither a DSCP number 0-63 nor a class name (CS0-CS7, AF11-AF43, EF, VA, LE)"
    )]
    NotDscp(String),
    #[error("DSCP {0} is above {MAX_DSCP}")]
    DscpAbove(u8),
    #[error("CE is set by the path, never by a sender: choose not-ect, ect0 or ect1")]
    Ce,
    #[error("'{0}' is not an ECN codepoint: not-ect, ect0 or ect1")]
    NotEcn(String),
}

impl From<Dscp> for u8 {
    fn from(d: Dscp) -> u8 {
        d.0
    }
}

/// An ECN codepoint (RFC 3168 §5; ECT(1) is L4S's, RFC 9331).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ecn {
    NotEct,
    Ect1,
    Ect0,
    /// Congestion Experienced: set by the path, never by a sender.
    Ce,
}

impl Ecn {
    pub const ALL: [Ecn; 4] = [Ecn::NotEct, Ecn::Ect1, Ecn::Ect0, Ecn::Ce];

    /// The two low bits of a TOS / Traffic Class byte.
    pub fn of_tos(tos: u8) -> Ecn {
        Ecn::ALL[usize::from(tos & 3)]
    }

    pub fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0,
            Ecn::Ect1 => 1,
            Ecn::Ect0 => 2,
            Ecn::Ce => 3,
        }
    }

    /// ECT(0) or ECT(1): a sender that says it reacts to CE.
    pub fn capable(self) -> bool {
        matches!(self, Ecn::Ect0 | Ecn::Ect1)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Ecn::NotEct => "not-ect",
            Ecn::Ect1 => "ect1",
            Ecn::Ect0 => "ect0",
            Ecn::Ce => "ce",
        }
    }

    /// `not-ect`, `ect0` or `ect1` (also `ect(0)`, `l4s` for ECT(1)); CE is refused: only
    /// the path sets it.
    pub fn parse(text: &str) -> Result<Ecn, MarkError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "not-ect" | "notect" | "none" | "0" => Ok(Ecn::NotEct),
            "ect0" | "ect(0)" | "2" => Ok(Ecn::Ect0),
            "ect1" | "ect(1)" | "l4s" | "1" => Ok(Ecn::Ect1),
            "ce" | "3" => Err(MarkError::Ce),
            _ => Err(MarkError::NotEcn(text.to_string())),
        }
    }
}

/// The TOS / Traffic Class byte of `dscp` and `ecn`.
pub fn tos(dscp: Dscp, ecn: Ecn) -> u8 {
    (dscp.0 << 2) | ecn.bits()
}

/// The marks a test sets: on every data packet of both sides (`dscp`, `ecn`) and on the
/// control connection (`control_dscp`). Unset leaves the socket's default (0), so a spec
/// without marks is the spec it always was.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dscp: Option<Dscp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecn: Option<Ecn>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_dscp: Option<Dscp>,
}

impl Marks {
    pub fn is_unset(&self) -> bool {
        *self == Marks::default()
    }

    /// The data packets' TOS byte, when either mark is asked for.
    pub fn data_tos(&self) -> Option<u8> {
        (self.dscp.is_some() || self.ecn.is_some()).then(|| {
            tos(
                self.dscp.unwrap_or(Dscp::DEFAULT),
                self.ecn.unwrap_or(Ecn::NotEct),
            )
        })
    }

    /// The control connection's TOS byte (never ECN-marked: a sender's TCP sets its own).
    pub fn control_tos(&self) -> Option<u8> {
        self.control_dscp.map(|d| tos(d, Ecn::NotEct))
    }

    /// A peer's spec says what it says: a CE in it is refused as the flag would be (the
    /// flag and why; the spec's check turns it into its error).
    pub fn refusal(&self) -> Option<(&'static str, &'static str)> {
        (self.ecn == Some(Ecn::Ce)).then_some(("--ecn", "CE is set by the path, never by a sender"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_and_numbers_parse_to_their_codepoints() {
        for (text, v) in [
            ("EF", 46),
            ("ef", 46),
            ("CS0", 0),
            ("cs6", 48),
            ("CS7", 56),
            ("AF11", 10),
            ("af23", 22),
            ("AF43", 38),
            ("VA", 44),
            ("LE", 1),
            ("46", 46),
            ("0x2e", 46),
            ("63", 63),
            (" 0 ", 0),
        ] {
            assert_eq!(Dscp::parse(text), Ok(Dscp(v)), "{text}");
        }
        for bad in ["64", "-1", "af44", "", "ef1", "0x40"] {
            let e = Dscp::parse(bad).unwrap_err().to_string();
            assert!(e.contains("0-63") && e.contains(&format!("'{bad}'")), "{e}");
        }
        assert_eq!(Dscp(46).words(), "46 (EF)");
        assert_eq!(Dscp(5).words(), "5");
        assert_eq!(Dscp(0).name(), Some("cs0"));
    }

    #[test]
    fn ecn_parses_refuses_ce_and_packs_with_dscp() {
        assert_eq!(Ecn::parse("ect1"), Ok(Ecn::Ect1));
        assert_eq!(Ecn::parse("ECT(0)"), Ok(Ecn::Ect0));
        assert_eq!(Ecn::parse("not-ect"), Ok(Ecn::NotEct));
        assert_eq!(Ecn::parse("ce"), Err(MarkError::Ce));
        assert!(Ecn::parse("ce").unwrap_err().to_string().contains("path"));
        assert!(Ecn::parse("ect2")
            .unwrap_err()
            .to_string()
            .contains("'ect2'"));
        assert_eq!(tos(Dscp(46), Ecn::Ect1), 0xb9);
        assert_eq!(tos(Dscp(46), Ecn::Ect0), 0xba);
        for b in 0..=255u8 {
            assert_eq!(tos(Dscp::of_tos(b), Ecn::of_tos(b)), b);
        }
        let m = Marks {
            ecn: Some(Ecn::Ect1),
            ..Default::default()
        };
        assert_eq!(m.data_tos(), Some(1));
        assert_eq!(Marks::default().data_tos(), None);
        let ce = Marks {
            ecn: Some(Ecn::Ce),
            ..Default::default()
        };
        assert_eq!(ce.refusal().map(|r| r.0), Some("--ecn"));
        let json = serde_json::to_string(&Marks {
            dscp: Some(Dscp(46)),
            ecn: Some(Ecn::Ect0),
            control_dscp: None,
        })
        .unwrap();
        assert_eq!(json, r#"{"dscp":46,"ecn":"ect0"}"#);
        assert!(serde_json::from_str::<Marks>(r#"{"dscp":64}"#).is_err());
    }
}
