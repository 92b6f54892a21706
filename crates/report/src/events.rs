//! `--json-stream`'s NDJSON events, one JSON object a line: each interval as it happens
//! (both sides' samples, or a watch's figures), then the end document. Their shape is
//! written once, here, for every command that streams.

use serde_json::json;
use sonde_results::document::IntervalFigures;
use sonde_results::{Document, IntervalSample};

/// A test's interval: the client's and the server's sample (either may be missing).
pub fn interval(client: Option<&IntervalSample>, server: Option<&IntervalSample>) -> String {
    json!({ "event": "interval", "client": client, "server": server }).to_string()
}

/// A watch's interval: the host figures over it.
pub fn watch_interval(figures: &IntervalFigures) -> String {
    json!({ "event": "interval", "interval": figures }).to_string()
}

/// The end of a test: its whole document.
pub fn end(doc: &Document) -> String {
    json!({ "event": "end", "document": doc }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_event_names_both_sides() {
        let v: serde_json::Value = serde_json::from_str(&interval(None, None)).unwrap();
        assert_eq!(v["event"], "interval");
        assert!(v["client"].is_null() && v["server"].is_null());
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 3);
    }
}
