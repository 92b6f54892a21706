//! CSV of the intervals of stored runs, one row per interval and run, for spreadsheets.

use sonde_results::Document;

pub fn intervals(runs: &[(i64, &Document)]) -> String {
    let mut out = String::from(
        "run,test,start_s,end_s,sender_bits_per_second,receiver_bits_per_second,requests_per_second,rtt_p50_ns,rtt_p99_ns,sender_packets_per_second,receiver_packets_per_second\n",
    );
    let f = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x}"));
    for (id, d) in runs {
        for i in &d.intervals {
            let rr = i.rr();
            let latency = rr.and_then(|r| r.latency_ns.as_ref());
            out.push_str(&format!(
                "{id},{},{},{},{},{},{},{},{},{},{}\n",
                d.test,
                i.start_s,
                i.end_s,
                f(i.sender.as_ref().map(|s| s.bits_per_second)),
                f(i.receiver.as_ref().map(|s| s.bits_per_second)),
                f(rr.and_then(|r| r.requests_per_second)),
                f(latency.map(|l| l.p50 as f64)),
                f(latency.map(|l| l.p99 as f64)),
                f(i.sender.as_ref().and_then(|s| s.packets_per_second())),
                f(i.receiver.as_ref().and_then(|s| s.packets_per_second())),
            ));
        }
    }
    out
}
