use super::*;

const S: u64 = 1_000_000_000;
/// The real-time clock's "now" in these tests (2026).
const REAL: u64 = 1_780_000_000 * S;

fn id(addr: &str, port: u16, ssid: u16) -> SessionId {
    SessionId {
        addr: addr.parse().unwrap(),
        port,
        ssid,
    }
}

fn heard(seq: u32, mono_ns: u64) -> Heard {
    Heard {
        seq,
        sent_ns: REAL + mono_ns,
        mono_ns,
        real_ns: REAL + mono_ns,
    }
}

fn limits() -> Limits {
    Limits {
        max_sessions: 4096,
        per_source: 64,
        idle_ns: Some(60 * S),
        once: true,
        max_skew_ns: Some(10 * S),
    }
}

/// Admits and numbers, as a stateful reflector does: the answer's number, or why none.
fn ask(t: &mut Sessions, k: SessionId, p: Heard) -> Result<u32, Refusal> {
    t.admit(k, p).map(|()| t.number(k))
}

#[test]
fn each_session_numbers_its_answers_from_zero_until_idle() {
    let mut t = Sessions::new(Limits {
        once: false,
        ..limits()
    });
    let a = id("198.18.0.1", 40000, 7);
    let got: Vec<_> = (0..3).map(|i| ask(&mut t, a, heard(i, 0))).collect();
    assert_eq!(got, [Ok(0), Ok(1), Ok(2)]);
    // Another port or SSID is another session; without `once` a number may come again.
    assert_eq!(ask(&mut t, id("198.18.0.1", 40001, 7), heard(0, 0)), Ok(0));
    assert_eq!(ask(&mut t, id("198.18.0.1", 40000, 8), heard(0, 0)), Ok(0));
    assert_eq!(ask(&mut t, a, heard(0, 1)), Ok(3));
    // Unheard for the idle time: anew from 0.
    assert_eq!(ask(&mut t, a, heard(3, 61 * S)), Ok(0));
}

/// A sequence number is answered once per session: a replay is refused and moves
/// nothing; reordered ones within the window are answered once, older ones never; another
/// SSID has its own window.
#[test]
fn each_sequence_number_of_a_session_is_answered_once() {
    let mut t = Sessions::new(limits());
    let a = id("198.18.0.1", 0, 1);
    let b = id("198.18.0.1", 0, 2);
    let c = id("198.18.0.1", 0, 3);
    let at = |seq| heard(seq, 1_000);
    let got: Vec<bool> = [
        (a, 100),
        (a, 100),
        (a, 98),
        (a, 98),
        (a, 200),
        (a, 137),
        (a, 136),
        (a, 137),
        (b, 100),
        (c, u32::MAX),
        (c, 0),
        (c, u32::MAX),
    ]
    .iter()
    .map(|&(k, seq)| t.admit(k, at(seq)).is_ok())
    .collect();
    assert_eq!(
        got,
        [true, false, true, false, true, true, false, false, true, true, true, false]
    );
    // Numbers go only to what was admitted.
    assert_eq!(t.number(a), 0);
    let mut s = Session::default();
    assert!((0..1000).all(|q| s.fresh(q)));
    assert!((0..1000).all(|q| !s.fresh(q)));
}

/// A sender that starts again (sequence numbers from 0, timestamps newer than any
/// answered) is a new session; the same packets replayed (their timestamps not newer) are
/// refused, and a replay does not number anything.
#[test]
fn a_sender_starting_again_is_a_new_session_and_a_replay_of_the_old_one_is_not() {
    let mut t = Sessions::new(limits());
    let a = id("198.18.0.1", 0, 0);
    let first: Vec<_> = (0..20)
        .map(|i| ask(&mut t, a, heard(i, u64::from(i))))
        .collect();
    assert_eq!(first, (0..20).map(Ok).collect::<Vec<_>>());
    for i in 0..20 {
        assert_eq!(
            ask(&mut t, a, heard(i, u64::from(i))),
            Err(Refusal::Replayed)
        );
    }
    let again: Vec<_> = (0..5)
        .map(|i| ask(&mut t, a, heard(i, S + u64::from(i))))
        .collect();
    assert_eq!(again, (0..5).map(Ok).collect::<Vec<_>>());
    // The first run's packets, older than the packet that started the new session:
    // replays, also those numbered beyond the new session's highest.
    assert_eq!(ask(&mut t, a, heard(7, 7)), Err(Refusal::Replayed));
    assert_eq!(ask(&mut t, a, heard(2, 2)), Err(Refusal::Replayed));
    assert_eq!(ask(&mut t, a, heard(5, S + 5)), Ok(5));
}

/// A timestamp further than the bound from the reflector's clock, either way, is refused
/// and opens no session.
#[test]
fn a_packet_stamped_outside_the_bound_is_refused_and_opens_nothing() {
    let mut t = Sessions::new(limits());
    let a = id("198.18.0.1", 0, 0);
    let mut p = heard(0, 0);
    for sent in [REAL - 11 * S, REAL + 11 * S, 0, REAL - 3600 * S] {
        p.sent_ns = sent;
        assert_eq!(t.admit(a, p), Err(Refusal::OutOfTime), "{sent}");
    }
    assert!(t.is_empty());
    for sent in [REAL - 10 * S, REAL + 10 * S] {
        p.sent_ns = sent;
        p.seq += 1;
        assert_eq!(t.admit(a, p), Ok(()), "{sent}");
    }
    // Unchecked where the policy says so.
    let mut open = Sessions::new(Limits {
        max_skew_ns: None,
        ..limits()
    });
    p.sent_ns = 0;
    assert_eq!(open.admit(a, p), Ok(()));
}

/// One source address opening sessions without end holds its cap only, its own least
/// recently heard forgotten; another source's session is untouched and a new sender is
/// answered.
#[test]
fn one_source_holds_its_cap_and_forgets_its_own_oldest() {
    let mut t = Sessions::new(limits());
    let other = id("198.18.0.9", 0, 1);
    assert_eq!(ask(&mut t, other, heard(0, 0)), Ok(0));
    for ssid in 0..10_000u16 {
        let k = id("198.18.0.1", 0, ssid);
        t.admit(k, heard(0, 1 + u64::from(ssid))).unwrap();
    }
    assert_eq!(t.len(), 65);
    assert_eq!(ask(&mut t, other, heard(1, 20_000)), Ok(1), "untouched");
    // The host's newest 64 are kept, its older ones forgotten.
    assert!(t.map.contains_key(&id("198.18.0.1", 0, 9_999)));
    assert!(!t.map.contains_key(&id("198.18.0.1", 0, 9_935)));
    assert_eq!(ask(&mut t, id("198.18.0.5", 0, 1), heard(0, 20_001)), Ok(0));
}

/// Many sources filling the table: never more than the bound, a new sender always
/// answered, and the sessions forgotten are the least recently heard.
#[test]
fn a_full_table_forgets_its_least_recently_heard_and_refuses_no_new_sender() {
    let mut t = Sessions::new(Limits {
        max_sessions: 1024,
        ..limits()
    });
    let live = id("198.18.255.1", 0, 1);
    let mut n = 0;
    for i in 0..20_000u32 {
        let addr = std::net::Ipv4Addr::from(0xc612_0000 + i / 8);
        let k = SessionId {
            addr: addr.into(),
            port: 0,
            ssid: i as u16,
        };
        assert_eq!(t.admit(k, heard(0, u64::from(i) * 10)), Ok(()));
        assert!(t.len() <= 1024);
        // A sender heard every 64 packets stays: never the least recently heard.
        if i % 64 == 0 {
            assert_eq!(ask(&mut t, live, heard(n, u64::from(i) * 10 + 1)), Ok(n));
            n += 1;
        }
    }
    assert!(t.len() > 1024 - 1024 / 16);
    let by_source: usize = t.by_source.values().map(Vec::len).sum();
    assert_eq!(by_source, t.len(), "the per-source index follows the table");
}
