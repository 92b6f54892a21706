//! How a command ends: its exit code, and an error as a person reads it (one line, each
//! cause once).

pub const EXIT_ERROR: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
/// A partial result: a test cut short.
pub const EXIT_PARTIAL: u8 = 3;
/// `sonde compare --fail-if-worse`: a metric got significantly worse beyond the limit.
pub const EXIT_WORSE: u8 = 4;

/// A usage error clap could not see (flags that clash, a label given twice): exit 2,
/// through the same path as every other error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(String);

impl From<anyhow::Error> for Usage {
    fn from(e: anyhow::Error) -> Usage {
        Usage(one_line(&e))
    }
}

/// The exit code of a command that failed with `e`.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    match e.downcast_ref::<Usage>() {
        Some(_) => EXIT_USAGE,
        None => EXIT_ERROR,
    }
}

/// An error and its causes on one line, each cause once: many errors already say their
/// cause in their own text, and anyhow's `{:#}` would repeat it (a busy agent's refusal
/// said twice).
pub fn one_line(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_said_is_not_said_again() {
        let busy = sonde_proto::ProtoError::Peer(sonde_proto::PeerError::Busy);
        let e =
            anyhow::Error::new(busy.clone()).context(format!("agent at 198.18.0.2:5301: {busy}"));
        let text = one_line(&e);
        assert_eq!(text.matches("the agent is busy").count(), 1, "{text}");
        let e = anyhow::anyhow!("cannot read").context("--key-file k");
        assert_eq!(one_line(&e), "--key-file k: cannot read");
    }
}
