//! `sonde serve --stamp` is no open reflector, tried as an attacker would from the client
//! namespace with packets built by the library's own codec: unlisted and spoofed sources,
//! short, long and malformed packets, wrong HMACs and a flood from one source. A counting
//! victim owns the spoofed address; every answer is measured against its request; and the
//! agent still runs its own tests afterwards.

use crate::common;

use std::time::{Duration, Instant};

use common::data_rogue::OTHER_ADDR;
use common::stamp_rogue::{answers, socket_in};
use common::*;
use sonde_proto::stamp::{tlv, Mode, ReflectorPacket, StampKey};

const STAMP_PORT: u16 = 8620;
const KEY_HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// A sender packet of session 0.
fn packet(seq: u32, len: usize, mode: Mode) -> Vec<u8> {
    common::stamp_rogue::packet(seq, 0, len, mode)
}

/// The reflector's address.
fn reflector() -> String {
    format!("{SERVER_ADDR}:{STAMP_PORT}")
}

fn lab_with_reflector(extra: &[&str]) -> Option<(Lab, Agent)> {
    let lab = Lab::new()?;
    let cidr = format!("{OTHER_ADDR}/24");
    lab.client_cmd("ip", &["addr", "add", &cidr, "dev", &lab.client_if]);
    let bind = reflector();
    let mut args = vec!["--stamp", bind.as_str()];
    args.extend_from_slice(extra);
    let agent = lab.start_agent_with(&args);
    Some((lab, agent))
}

#[test]
fn stamp_reflector_answers_listed_sources_with_no_more_bytes_than_came() {
    let allow = format!("{CLIENT_ADDR}/32");
    let Some((lab, agent)) =
        lab_with_reflector(&["--stamp-allow", &allow, "--stamp-max-pps", "1000"])
    else {
        return;
    };
    let listed = socket_in(&lab, CLIENT_ADDR);
    let open = Mode::Unauthenticated;
    // Well-formed, padded, and the sizes an attacker would try: each answered at its own
    // length or not at all.
    let mut sent = Vec::new();
    for (i, len) in [44usize, 100, 1400, 8000].into_iter().enumerate() {
        let p = packet(i as u32, len, open);
        listed.send_to(&p, reflector()).unwrap();
        sent.push(len);
    }
    let got = answers(&listed);
    assert_eq!(got, sent, "each request answered once, at its own length");
    // Short (no base packet), a TWAMP-light sender's 14 bytes, 1 byte, oversized (9001),
    // and garbage TLVs: short and oversized get nothing, the TLVs are flagged, not grown.
    for p in [
        packet(9, 43, open),
        packet(10, 14, open),
        vec![1u8],
        vec![0u8; 9001],
    ] {
        listed.send_to(&p, reflector()).unwrap();
    }
    let mut bad_tlv = packet(11, 60, open);
    bad_tlv[44..52].copy_from_slice(&[0, 3, 0xff, 0xff, 0, 0xee, 0, 1]);
    listed.send_to(&bad_tlv, reflector()).unwrap();
    let got = answers(&listed);
    assert_eq!(
        got,
        vec![60],
        "only the full packet with bad TLVs is answered, at 60 bytes"
    );

    // An unlisted source, and the same packets spoofed as coming from an unlisted host
    // (the victim, whose socket counts what reaches it): nothing.
    let victim = socket_in(&lab, OTHER_ADDR);
    for seq in 0..20 {
        victim.send_to(&packet(seq, 44, open), reflector()).unwrap();
    }
    assert_eq!(
        answers(&victim),
        Vec::<usize>::new(),
        "an unlisted source is not answered"
    );

    // The agent's own tests are unaffected.
    let out = run(lab.sonde(&agent, "ping", &["-t", "1", "--warmup", "0", "--udp"]));
    assert!(
        out.status.success(),
        "ping after the attacks: {}",
        stderr(&out)
    );
}

#[test]
fn stamp_reflector_without_an_allowlist_answers_nobody() {
    let Some((lab, _agent)) = lab_with_reflector(&[]) else {
        return;
    };
    let s = socket_in(&lab, CLIENT_ADDR);
    for seq in 0..20 {
        s.send_to(&packet(seq, 44, Mode::Unauthenticated), reflector())
            .unwrap();
    }
    assert_eq!(answers(&s), Vec::<usize>::new());
}

#[test]
fn stamp_reflector_flood_from_one_source_gets_its_rate_only() {
    let allow = format!("{CLIENT_ADDR}/32");
    let Some((lab, agent)) =
        lab_with_reflector(&["--stamp-allow", &allow, "--stamp-max-pps", "50"])
    else {
        return;
    };
    let s = socket_in(&lab, CLIENT_ADDR);
    let start = Instant::now();
    let p = packet(1, 44, Mode::Unauthenticated);
    let mut sent = 0;
    while sent < 2000 && start.elapsed() < Duration::from_millis(500) {
        let _ = s.send_to(&p, reflector());
        sent += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    // Every answer, and when the last came. The reflector drains the requests queued on its
    // socket after the flood, admitting more at 50/s as its bucket refills, so the answers
    // go on for as long as the drain: beside other work that ran past the 0.2 s once
    // allowed. The bound is the bucket's own: its burst (50) plus 50/s up to the last
    // answer (admitted before it arrived), and one for rounding.
    let mut buf = [0u8; 65536];
    let (mut got, mut last) = (0usize, start.elapsed());
    while s.recv(&mut buf).is_ok() {
        got += 1;
        last = start.elapsed();
    }
    let most = 50 + (50.0 * last.as_secs_f64()).ceil() as usize + 1;
    eprintln!(
        "flood: {sent} requests in {elapsed:.2} s, {got} answers, the last at {:.2} s (at most {most})",
        last.as_secs_f64()
    );
    // Far over the bucket: 500 or more in 0.5 s (2,000 on a quiet machine).
    assert!(sent >= 500, "a flood: {sent} sent in {elapsed:.2} s");
    assert!(
        (40..=most).contains(&got),
        "{got} answers to {sent} requests in {elapsed:.2} s, at most {most}"
    );
    let out = run(lab.sonde(&agent, "ping", &["-t", "1", "--warmup", "0"]));
    assert!(
        out.status.success(),
        "ping after the flood: {}",
        stderr(&out)
    );
}

#[test]
fn stamp_reflector_authenticated_answers_only_good_hmacs() {
    let key_path = temp_file("stamp-key");
    std::fs::write(&key_path, format!("{KEY_HEX}\n")).unwrap();
    std::fs::set_permissions(
        &key_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let allow = format!("{CLIENT_ADDR}/32");
    let key_arg = key_path.to_str().unwrap();
    let Some((lab, _agent)) =
        lab_with_reflector(&["--stamp-allow", &allow, "--stamp-key-file", key_arg])
    else {
        return;
    };
    let key = StampKey::new(&hex::decode(KEY_HEX).unwrap()).unwrap();
    let wrong = StampKey::new(&[0x5a; 32]).unwrap();
    let s = socket_in(&lab, CLIENT_ADDR);
    // Wrong key, a flipped bit, unauthenticated 44 and 112 bytes: nothing.
    let mut flipped = packet(2, 112, Mode::Authenticated(&key));
    flipped[20] ^= 1;
    for p in [
        packet(1, 112, Mode::Authenticated(&wrong)),
        flipped,
        packet(3, 44, Mode::Unauthenticated),
        packet(4, 112, Mode::Unauthenticated),
    ] {
        s.send_to(&p, reflector()).unwrap();
    }
    assert_eq!(
        answers(&s),
        Vec::<usize>::new(),
        "no answer without the key's HMAC"
    );
    // The key's own, with a sealed Timestamp Information TLV: answered, sealed, filled.
    let mut good = packet(5, 140, Mode::Authenticated(&key));
    tlv::put(&mut good[112..], tlv::TYPE_TIMESTAMP_INFO, 4).unwrap();
    tlv::put_hmac(&mut good[112..], 8, &key, 5).unwrap();
    s.send_to(&good, reflector()).unwrap();
    let mut buf = [0u8; 2048];
    let n = s.recv(&mut buf).expect("an answer to the key's packet");
    assert_eq!(n, 140);
    let answer = ReflectorPacket::read(&buf[..n], Mode::Authenticated(&key))
        .expect("the answer's HMAC checks");
    assert_eq!(answer.sender_seq, 5);
    assert_eq!(tlv::check_hmac(&buf[112..n], &key, answer.seq), Some(true));
    assert!(
        tlv::TimestampInfo::find(&buf[112..n]).is_some(),
        "the reflector filled its Timestamp Information"
    );
}
