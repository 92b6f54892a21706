//! An error as a person reads it: one line, each cause once.

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
