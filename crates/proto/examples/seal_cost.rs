//! What sealing costs a control frame: encodes and seals an interval sample (the frame a
//! side sends once per interval) and a 1,024-connection stream result many times, then
//! opens them, and prints the time per frame. `cargo run --release -p sonde-proto
//! --example seal_cost`; BENCHMARKS.md turns it into a share of a test's CPU.

use std::time::Instant;

use sonde_proto::seal::{Opener, Sealer};
use sonde_proto::{encode, encode_sealed, Message};
use sonde_results::{IntervalSample, SampleSection, StreamSample};

fn per_frame(msg: &Message, rounds: u32) -> (usize, f64, f64) {
    let plain = encode(msg).unwrap();
    let t = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(encode(msg).unwrap());
    }
    let unsealed = t.elapsed().as_secs_f64() / f64::from(rounds);
    let mut s = Sealer::new([7; 32]);
    let mut o = Opener::new([7; 32]);
    let t = Instant::now();
    for _ in 0..rounds {
        let f = encode_sealed(msg, Some(&mut s)).unwrap();
        std::hint::black_box(o.open(&f[4..]).unwrap());
    }
    let sealed = t.elapsed().as_secs_f64() / f64::from(rounds);
    (plain.len(), unsealed, sealed)
}

fn main() {
    let sample = Message::Interval {
        sample: IntervalSample {
            index: 3,
            start_s: 3.0,
            end_s: 4.0,
            cpu_busy_percent: Some(42.0),
            partial: false,
            section: SampleSection::Stream(StreamSample {
                sent_bytes: 1 << 30,
                received_bytes: 1 << 30,
                tcp: Vec::new(),
            }),
        },
    };
    let notes: Vec<String> = (0..1024)
        .map(|i| format!("connection {i}: 123456789 bytes"))
        .collect();
    let big = Message::Error {
        error: sonde_proto::PeerError::Internal {
            message: notes.join(";"),
        },
    };
    for (what, msg, rounds) in [
        ("interval sample", &sample, 200_000),
        ("40 kB frame", &big, 2_000),
    ] {
        let (bytes, plain, sealed) = per_frame(msg, rounds);
        println!(
            "{what}: {bytes} B, encode {:.2} us, encode + seal + open {:.2} us, the MAC adds {:.2} us",
            plain * 1e6,
            sealed * 1e6,
            (sealed - plain) * 1e6
        );
    }
}
