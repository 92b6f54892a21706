//! An agent's own labels: announced in `Accepted` only, readable by older peers both
//! ways, and cut to the rules when a rogue agent announces too many or too large.

mod common;

use std::time::Instant;

use common::*;
use sonde_proto::labels::{MAX_LABELS, MAX_LABEL_BYTES};
use sonde_proto::{
    encode, AgentSession, ClientEvent, ClientSession, Labels, Message, Session, Timeouts,
};

fn zone_node() -> Labels {
    [
        ("zone".to_string(), "a".to_string()),
        ("node".to_string(), "n-1".to_string()),
    ]
    .into()
}

fn welcome_event(c: &mut ClientSession) -> (Labels, Option<String>) {
    std::iter::from_fn(|| c.poll_event())
        .find_map(|e| match e {
            ClientEvent::Welcome {
                labels, label_note, ..
            } => Some((labels, label_note)),
            _ => None,
        })
        .expect("the controller reports the agent's Accepted")
}

#[test]
fn an_accepted_controller_learns_the_agents_labels_and_welcome_carries_none() {
    let t0 = Instant::now();
    let mut c = ClientSession::new(spec(), "s", "c", Timeouts::default(), t0);
    let mut a = AgentSession::new("s", "serve", &["stream"], Timeouts::default(), t0)
        .with_labels(zone_node());
    let hello = c.poll_transmit().unwrap();
    a.handle_bytes(&hello, t0).unwrap();
    let welcome = a.poll_transmit().unwrap();
    let accepted = a.poll_transmit().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(text(&welcome).contains("\"welcome\""), "{}", text(&welcome));
    assert!(!text(&welcome).contains("zone"), "{}", text(&welcome));
    assert!(text(&accepted).contains("\"zone\""), "{}", text(&accepted));
    c.handle_bytes(&welcome, t0).unwrap();
    c.handle_bytes(&accepted, t0).unwrap();
    assert_eq!(welcome_event(&mut c), (zone_node(), None));
}

#[test]
fn accepted_without_labels_is_read_by_either_version() {
    // An older agent's Accepted has no labels field: it decodes as no label.
    let old: Message =
        serde_json::from_str(r#"{"type":"accepted","command":"c","capabilities":["stream"]}"#)
            .unwrap();
    let Message::Accepted { labels, .. } = &old else {
        panic!("{old:?}")
    };
    assert!(labels.is_empty());
    // A newer agent without labels sends nothing an older controller has not seen.
    let json = serde_json::to_string(&old).unwrap();
    assert!(!json.contains("labels"), "{json}");
    // With labels, the round trip keeps them.
    let new = Message::Accepted {
        command: "c".into(),
        capabilities: vec!["stream".into()],
        labels: zone_node(),
    };
    let back: Message = serde_json::from_str(&serde_json::to_string(&new).unwrap()).unwrap();
    assert_eq!(back, new);
    // And an agent that announces none gives the controller an empty set, no note.
    let t0 = Instant::now();
    let (mut c, mut a) = pair(t0);
    pump(&mut c, &mut a, t0).0.unwrap();
    assert_eq!(welcome_event(&mut c), (Labels::new(), None));
}

/// A controller handed `accepted` by hand after a keyless `Welcome`.
fn controller_reading(accepted: Message) -> ClientSession {
    let t0 = Instant::now();
    let mut c = ClientSession::new(spec(), "s", "c", Timeouts::default(), t0);
    let welcome = Message::Welcome {
        magic: "netsonde".into(),
        version: 3,
        software: "rogue".into(),
        challenge: None,
        proof: None,
    };
    c.handle_bytes(&encode(&welcome).unwrap(), t0).unwrap();
    c.handle_bytes(&encode(&accepted).unwrap(), t0).unwrap();
    c
}

#[test]
fn a_rogue_agents_ten_thousand_labels_and_megabyte_value_are_cut_with_a_note() {
    let mut announced: Labels = (0..10_000)
        .map(|i| (format!("l{i:05}"), format!("v{i}")))
        .collect();
    announced.insert("a_big".into(), "x".repeat(1 << 20));
    announced.insert("__meta".into(), "x".into());
    announced.insert("source".into(), "spoofed".into());
    announced.insert("ctl".into(), "a\u{1b}[2Jb".into());
    let mut c = controller_reading(Message::Accepted {
        command: "rogue".into(),
        capabilities: vec!["stream".into()],
        labels: announced,
    });
    let (kept, note) = welcome_event(&mut c);
    assert_eq!(kept.len(), MAX_LABELS);
    assert!(kept.values().all(|v| v.len() <= MAX_LABEL_BYTES));
    for gone in ["a_big", "__meta", "source", "ctl"] {
        assert!(!kept.contains_key(gone), "{gone} kept");
    }
    let note = note.expect("a note says labels were dropped");
    assert!(note.contains("announced 10004 label(s)"), "{note}");
    assert!(note.contains("dropped 4 that break the rules"), "{note}");
    assert!(note.contains("dropped 9968 beyond"), "{note}");
    // The session goes on: the controller sent the test's Setup.
    let sent: Vec<_> = std::iter::from_fn(|| c.poll_transmit()).collect();
    let last = String::from_utf8_lossy(sent.last().expect("frames sent")).into_owned();
    assert!(last.contains("\"setup\""), "{last}");
}
