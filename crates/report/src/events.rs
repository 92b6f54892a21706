//! `--json-stream`'s NDJSON events, one JSON object a line: each interval as it happens
//! (both sides' samples, or a watch's figures), then the end document. Their shape is
//! written once, here, for every command that streams.

use serde_json::{json, Value};
use sonde_results::document::IntervalFigures;
use sonde_results::{Document, IntervalSample, SampleSection};

/// A test's interval: the client's and the server's sample (either may be missing).
pub fn interval(client: Option<&IntervalSample>, server: Option<&IntervalSample>) -> String {
    let (client, server) = (client.map(flat), server.map(flat));
    json!({ "event": "interval", "client": client, "server": server }).to_string()
}

/// A sample as scripts read it: one flat object, its kind's figures beside the shared
/// ones (the keys every release has streamed, whatever the wire's shape).
fn flat(s: &IntervalSample) -> Value {
    let (sent, received) = s.bytes();
    let mut v = json!({
        "index": s.index,
        "start_s": s.start_s,
        "end_s": s.end_s,
        "sent_bytes": sent,
        "received_bytes": received,
        "cpu_busy_percent": s.cpu_busy_percent,
    });
    match &s.section {
        SampleSection::Stream(st) if !st.tcp.is_empty() => v["tcp"] = json!(st.tcp),
        SampleSection::Stream(_) => {}
        SampleSection::Rr(r) => {
            v["messages"] = json!(r.messages);
            if let Some(l) = &r.latency_ns {
                v["latency_ns"] = json!(l);
            }
        }
        SampleSection::Pps(p) => v["packets"] = json!(p.packets),
    }
    if s.partial {
        v["partial"] = json!(true);
    }
    v
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

    /// Each kind's sample streams the flat keys scripts have read since schema 1.
    #[test]
    fn a_sample_streams_flat_with_its_kinds_keys() {
        use sonde_results::{PpsSample, RrSample, StreamSample};
        let sample = |section| IntervalSample {
            index: 1,
            start_s: 1.0,
            end_s: 2.0,
            cpu_busy_percent: Some(5.0),
            partial: false,
            section,
        };
        let keys = |s: &IntervalSample| {
            let v: Value = serde_json::from_str(&interval(Some(s), None)).unwrap();
            let mut k: Vec<String> = v["client"].as_object().unwrap().keys().cloned().collect();
            k.sort();
            k.join(",")
        };
        let shared = "cpu_busy_percent,end_s,index,received_bytes,sent_bytes,start_s";
        let stream = sample(SampleSection::Stream(StreamSample {
            sent_bytes: 10,
            ..Default::default()
        }));
        assert_eq!(keys(&stream), shared);
        let rr = sample(SampleSection::Rr(RrSample {
            messages: 7,
            latency_ns: None,
            stages: None,
            oneway: None,
        }));
        assert_eq!(
            keys(&rr),
            "cpu_busy_percent,end_s,index,messages,received_bytes,sent_bytes,start_s"
        );
        let mut pps = sample(SampleSection::Pps(PpsSample {
            packets: 3,
            ..Default::default()
        }));
        pps.partial = true;
        assert_eq!(
            keys(&pps),
            "cpu_busy_percent,end_s,index,packets,partial,received_bytes,sent_bytes,start_s"
        );
        let v: Value = serde_json::from_str(&interval(Some(&stream), None)).unwrap();
        assert_eq!(v["client"]["sent_bytes"], 10);
    }
}
