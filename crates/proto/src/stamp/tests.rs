//! Byte-exact vectors laid out by hand from RFC 8762 §4.2/§4.3 and RFC 8972 §3/§4 (the
//! HMACs computed apart, with Python's hmac module), then the reflector's rules.

use super::tlv::{self, FLAG_INTEGRITY};
use super::*;

fn hex(s: &str) -> Vec<u8> {
    hex::decode(s.replace([' ', '\n'], "")).unwrap()
}

fn key() -> StampKey {
    StampKey::new(&[0x42; 32]).unwrap()
}

/// S set, NTP, scale 10, multiplier 0x5b.
const EST: u16 = 0x8a5b;

fn sender() -> SenderPacket {
    SenderPacket {
        seq: 0x0102_0304,
        timestamp: Timestamp(0x1122_3344_5566_7788),
        estimate: ErrorEstimate::from_bits(EST),
        ssid: 0xbeef,
    }
}

fn reflected() -> ReflectorPacket {
    ReflectorPacket {
        seq: 7,
        timestamp: Timestamp(0xaabb_ccdd_eeff_0011),
        estimate: ErrorEstimate::from_bits(0x0f84),
        ssid: 0xbeef,
        receive: Timestamp(0x2233_4455_6677_8899),
        sender_seq: 0x0102_0304,
        sender_timestamp: Timestamp(0x1122_3344_5566_7788),
        sender_estimate: ErrorEstimate::from_bits(EST),
        sender_ttl: 64,
    }
}

#[test]
fn sender_unauthenticated_is_rfc_8762_figure_2() {
    let mut out = [0xffu8; 44];
    sender().write(Mode::Unauthenticated, &mut out).unwrap();
    let want = hex("01020304 1122334455667788 8a5b beef")
        .into_iter()
        .chain([0; 28])
        .collect::<Vec<_>>();
    assert_eq!(out.to_vec(), want);
    assert_eq!(
        SenderPacket::read(&out, Mode::Unauthenticated).unwrap(),
        sender()
    );
}

#[test]
fn reflector_unauthenticated_is_rfc_8762_figure_4() {
    let mut out = [0xffu8; 44];
    reflected().write(Mode::Unauthenticated, &mut out).unwrap();
    let want = hex(
        "00000007 aabbccddeeff0011 0f84 beef 2233445566778899 01020304 1122334455667788 8a5b 0000 40 000000",
    );
    assert_eq!(out.to_vec(), want);
    assert_eq!(
        ReflectorPacket::read(&out, Mode::Unauthenticated).unwrap(),
        reflected()
    );
}

#[test]
fn sender_authenticated_is_rfc_8762_figure_3_with_its_hmac() {
    let key = key();
    let mut out = [0xffu8; 112];
    sender().write(Mode::Authenticated(&key), &mut out).unwrap();
    let mut want = hex("01020304")
        .into_iter()
        .chain([0; 12])
        .collect::<Vec<_>>();
    want.extend(hex("1122334455667788 8a5b beef"));
    want.extend([0; 68]);
    want.extend(hex("357ff96337eeed37089107dc4cba6b92"));
    assert_eq!(out.to_vec(), want);
    assert_eq!(
        SenderPacket::read(&out, Mode::Authenticated(&key)).unwrap(),
        sender()
    );
}

#[test]
fn reflector_authenticated_is_rfc_8762_figure_5_with_its_hmac() {
    let key = key();
    let mut out = [0xffu8; 112];
    reflected()
        .write(Mode::Authenticated(&key), &mut out)
        .unwrap();
    let mut want = vec![0u8; 112];
    want[0..4].copy_from_slice(&hex("00000007"));
    want[16..28].copy_from_slice(&hex("aabbccddeeff0011 0f84 beef"));
    want[32..40].copy_from_slice(&hex("2233445566778899"));
    want[48..52].copy_from_slice(&hex("01020304"));
    want[64..74].copy_from_slice(&hex("1122334455667788 8a5b"));
    want[80] = 64;
    want[96..].copy_from_slice(&hex("b5f3de79b22275c0c6bf93210d95ffe5"));
    assert_eq!(out.to_vec(), want);
    assert_eq!(
        ReflectorPacket::read(&out, Mode::Authenticated(&key)).unwrap(),
        reflected()
    );
}

#[test]
fn a_wrong_hmac_or_key_is_refused() {
    let key = key();
    let mut out = [0u8; 112];
    sender().write(Mode::Authenticated(&key), &mut out).unwrap();
    let other = StampKey::new(&[0x43; 32]).unwrap();
    assert_eq!(
        SenderPacket::read(&out, Mode::Authenticated(&other)),
        Err(StampError::BadHmac)
    );
    out[5] ^= 1; // an MBZ byte the HMAC covers
    assert_eq!(
        SenderPacket::read(&out, Mode::Authenticated(&key)),
        Err(StampError::BadHmac)
    );
    assert_eq!(
        StampKey::new(&[1; 15]).unwrap_err(),
        StampError::KeyTooShort(15)
    );
}

#[test]
fn short_packets_are_refused_and_twamp_light_answers_read() {
    let mut out = [0u8; 44];
    reflected().write(Mode::Unauthenticated, &mut out).unwrap();
    let light = ReflectorPacket::read(&out[..41], Mode::Unauthenticated).unwrap();
    assert_eq!(light, reflected());
    assert_eq!(
        ReflectorPacket::read(&out[..40], Mode::Unauthenticated),
        Err(StampError::Short { got: 40, need: 41 })
    );
    assert_eq!(
        SenderPacket::read(&out[..43], Mode::Unauthenticated),
        Err(StampError::Short { got: 43, need: 44 })
    );
    let key = key();
    assert!(matches!(
        SenderPacket::read(&[0; 111], Mode::Authenticated(&key)),
        Err(StampError::Short { .. })
    ));
    assert!(matches!(
        sender().write(Mode::Unauthenticated, &mut [0; 43]),
        Err(StampError::NoRoom { .. })
    ));
}

#[test]
fn ntp_and_ptp_timestamps() {
    assert_eq!(
        Timestamp::from_unix_ns(0, TimeFormat::Ntp),
        Timestamp(0x83aa_7e80_0000_0000)
    );
    assert_eq!(
        Timestamp::from_unix_ns(1_500_000_000, TimeFormat::Ntp),
        Timestamp(0x83aa_7e81_8000_0000)
    );
    assert_eq!(
        Timestamp(0x83aa_7e81_8000_0000).to_unix_ns(TimeFormat::Ntp),
        1_500_000_000
    );
    // 2026-11-27, to the nanosecond and back (2^-32 s steps round to within 1 ns).
    let ns = 1_795_788_000_123_456_789;
    let back = Timestamp::from_unix_ns(ns, TimeFormat::Ntp).to_unix_ns(TimeFormat::Ntp);
    assert!(back.abs_diff(ns) <= 1, "{back} vs {ns}");
    // The last nanosecond of a second stays in it (1 ns is 4.3 fraction steps).
    let last = Timestamp::from_unix_ns(9_999_999_999, TimeFormat::Ntp);
    assert_eq!(
        last,
        Timestamp(((NTP_UNIX_OFFSET_S + 9) << 32) | 0xffff_fffc)
    );
    assert_eq!(last.to_unix_ns(TimeFormat::Ntp), 9_999_999_999);
    let ptp = Timestamp::from_unix_ns(ns, TimeFormat::Ptp);
    assert_eq!(ptp.0, (1_795_788_000u64 << 32) | 123_456_789);
    assert_eq!(ptp.to_unix_ns(TimeFormat::Ptp), ns);
}

#[test]
fn error_estimate_bits_and_bounds() {
    // RFC 4656 §4.1.2: multiplier × 2^(scale−32) s. 1 ms needs scale 15, multiplier 132.
    let ms = ErrorEstimate::from_bound_ns(1_000_000, true, TimeFormat::Ntp);
    assert_eq!((ms.scale, ms.multiplier, ms.to_bits()), (15, 132, 0x8f84));
    assert_eq!(ms.bound_ns(), Some(1_007_081)); // 132/131072 s, never under the bound
    let ptp = ErrorEstimate::from_bits(0x4001);
    assert_eq!(
        (ptp.synchronized, ptp.format, ptp.scale, ptp.multiplier),
        (false, TimeFormat::Ptp, 0, 1)
    );
    assert_eq!(ptp.bound_ns(), Some(1)); // 2^-32 s, rounded up
    assert_eq!(ErrorEstimate::from_bits(0x8a00).bound_ns(), None); // multiplier 0: invalid
    assert_eq!(
        ErrorEstimate::from_bound_ns(0, false, TimeFormat::Ntp).multiplier,
        1
    );
    assert_eq!(ErrorEstimate::unknown(TimeFormat::Ntp).to_bits(), 0x3fff);
    for bound in [1, 999, 25_000, 1_000_000, 3_600_000_000_000] {
        let est = ErrorEstimate::from_bound_ns(bound, false, TimeFormat::Ntp);
        let got = est.bound_ns().unwrap();
        assert!(
            got >= bound && got <= bound + bound / 127 + 1,
            "{bound} -> {got}"
        );
        assert_eq!(ErrorEstimate::from_bits(est.to_bits()), est);
    }
}

#[test]
fn tlvs_timestamp_info_padding_and_hmac() {
    let key = key();
    let mut area = [0u8; 32];
    let info = TimestampInfo::software(SyncSource::Ntp);
    tlv::put(&mut area, tlv::TYPE_TIMESTAMP_INFO, 4)
        .unwrap()
        .copy_from_slice(&info.to_bytes());
    let end = tlv::put_hmac(&mut area, 8, &key, 9).unwrap();
    assert_eq!(end, 28);
    assert_eq!(
        area[..28].to_vec(),
        hex("00030004 01020102 00080010 527b149cdcb649ca77a9c85bb0f62785")
    );
    assert_eq!(tlv::check_hmac(&area, &key, 9), Some(true));
    assert_eq!(tlv::check_hmac(&area, &key, 10), Some(false));
    assert_eq!(TimestampInfo::find(&area), Some(info));
    let mut pad = [0xffu8; 20];
    assert_eq!(tlv::put_extra_padding(&mut pad).unwrap(), 20);
    assert_eq!(pad[..4].to_vec(), hex("00010010"));
    let walked: Vec<_> = tlv::iter(&pad).collect::<Result<_, _>>().unwrap();
    assert_eq!(
        (walked.len(), walked[0].kind, walked[0].value.len()),
        (1, 1, 16)
    );
    // Plain zero padding holds no TLV; a length past the end is an error at its offset.
    assert_eq!(tlv::iter(&[0; 16]).count(), 0);
    let bad = hex("00030004 01020102 00010040 0000");
    let walked: Vec<_> = tlv::iter(&bad).collect();
    assert_eq!(
        walked[1],
        Err(StampError::MalformedTlv {
            at: 8,
            why: "its length runs past the packet"
        })
    );
}

fn how(seq: Option<u32>) -> Reflection {
    Reflection {
        seq,
        receive: Timestamp(0x2233_4455_6677_8899),
        transmit: Timestamp(0xaabb_ccdd_eeff_0011),
        estimate: ErrorEstimate::from_bits(0x0f84),
        ttl: 64,
        info: TimestampInfo::software(SyncSource::LocalFreeRunning),
        boot_id: None,
        tos: None,
        dscp_policy: Default::default(),
    }
}

/// A Boot ID TLV the sender left zeroed is filled by a reflector that knows its boot id,
/// under the answer's HMAC TLV; one that does not flags it U and fills nothing.
#[test]
fn a_boot_id_tlv_is_filled_and_signed_by_a_sonde_reflector_and_flagged_by_another() {
    let key = StampKey::new(&[7; 32]).unwrap();
    let mode = Mode::Authenticated(&key);
    let mut request = vec![0u8; AUTH_BASE_BYTES + 20 + 20];
    SenderPacket {
        seq: 3,
        ..Default::default()
    }
    .write(mode, &mut request)
    .unwrap();
    tlv::put(&mut request[AUTH_BASE_BYTES..], tlv::TYPE_BOOT_ID, 16).unwrap();
    tlv::put_hmac(&mut request[AUTH_BASE_BYTES..], 20, &key, 3).unwrap();
    let mut out = vec![0u8; 512];
    let id = [0xab; 16];
    let sonde = Reflection {
        boot_id: Some(id),
        ..how(Some(9))
    };
    let n = reflect(&request, mode, &sonde, &mut out).unwrap();
    let area = &out[AUTH_BASE_BYTES..n];
    assert_eq!(tlv::find_boot_id(area), Some(id));
    assert_eq!(tlv::check_hmac(area, &key, 9), Some(true), "signed with it");
    let n = reflect(&request, mode, &how(Some(9)), &mut out).unwrap();
    let area = &out[AUTH_BASE_BYTES..n];
    assert_eq!(tlv::find_boot_id(area), None);
    let text = "3f1c2a9e-5b7d-4e0f-9a1b-0c2d3e4f5a6b";
    let bytes = tlv::boot_id_from_text(&format!("{text}\n")).unwrap();
    assert_eq!(tlv::boot_id_text(&bytes), text);
    assert_eq!(tlv::boot_id_from_text("3f1c"), None);
    assert_eq!(area[0] & tlv::FLAG_UNRECOGNIZED, tlv::FLAG_UNRECOGNIZED);
}

#[test]
fn reflect_answers_as_many_bytes_as_came_stateless_and_stateful() {
    let mut request = [0u8; 44];
    sender().write(Mode::Unauthenticated, &mut request).unwrap();
    let mut out = [0u8; 1500];
    let len = reflect(&request, Mode::Unauthenticated, &how(Some(7)), &mut out).unwrap();
    assert_eq!(len, 44);
    assert_eq!(
        ReflectorPacket::read(&out[..len], Mode::Unauthenticated).unwrap(),
        reflected()
    );
    let len = reflect(&request, Mode::Unauthenticated, &how(None), &mut out).unwrap();
    assert_eq!(
        ReflectorPacket::read(&out[..len], Mode::Unauthenticated)
            .unwrap()
            .seq,
        0x0102_0304
    );
    // Padded to 200 bytes with an Extra Padding TLV: 200 bytes back, the TLV as it came.
    let mut padded = [0u8; 200];
    sender().write(Mode::Unauthenticated, &mut padded).unwrap();
    tlv::put_extra_padding(&mut padded[44..]).unwrap();
    padded[60] = 0x5a;
    assert_eq!(
        reflect(&padded, Mode::Unauthenticated, &how(Some(7)), &mut out).unwrap(),
        200
    );
    assert_eq!(out[44..200], padded[44..]);
    // Shorter than the base, or no room: no answer.
    assert!(matches!(
        reflect(&request[..43], Mode::Unauthenticated, &how(None), &mut out),
        Err(StampError::Short { .. })
    ));
    assert!(matches!(
        reflect(&padded, Mode::Unauthenticated, &how(None), &mut out[..100]),
        Err(StampError::NoRoom { .. })
    ));
}

#[test]
fn reflect_fills_timestamp_info_and_flags_unknown_and_malformed_tlvs() {
    let mut request = vec![0u8; 44];
    sender().write(Mode::Unauthenticated, &mut request).unwrap();
    request.extend(hex(
        "00030004 00000000 00fe0002 abcd 00030002 0000 00010010 0000",
    ));
    let mut out = [0u8; 512];
    let len = reflect(&request, Mode::Unauthenticated, &how(None), &mut out).unwrap();
    assert_eq!(len, request.len());
    assert_eq!(
        out[44..len].to_vec(),
        hex("00030004 05020502 80fe0002 abcd 40030002 0000 40010010 0000")
    );
    assert_eq!(TimestampInfo::find(&out[44..len]), Some(how(None).info));
}

#[test]
fn reflect_authenticated_checks_both_hmacs_and_reseals_the_tlvs() {
    let key = key();
    let mode = Mode::Authenticated(&key);
    let mut request = vec![0u8; 112 + 28];
    sender().write(mode, &mut request).unwrap();
    tlv::put(&mut request[112..], tlv::TYPE_TIMESTAMP_INFO, 4).unwrap();
    tlv::put_hmac(&mut request[112..], 8, &key, sender().seq).unwrap();
    let mut out = [0u8; 512];
    let len = reflect(&request, mode, &how(Some(7)), &mut out).unwrap();
    assert_eq!(len, 140);
    assert_eq!(
        ReflectorPacket::read(&out[..len], mode).unwrap(),
        reflected()
    );
    assert_eq!(tlv::check_hmac(&out[112..len], &key, 7), Some(true));
    assert_eq!(TimestampInfo::find(&out[112..len]), Some(how(None).info));
    // A wrong TLV HMAC: answered (the base checks), every TLV flagged I, not resealed.
    request[112 + 12] ^= 1;
    let len = reflect(&request, mode, &how(Some(7)), &mut out).unwrap();
    assert_eq!(out[112] & FLAG_INTEGRITY, FLAG_INTEGRITY);
    assert_eq!(out[120] & FLAG_INTEGRITY, FLAG_INTEGRITY);
    assert_eq!(tlv::check_hmac(&out[112..len], &key, 7), Some(false));
    // A wrong base HMAC: no answer; nor for an unauthenticated request.
    request[100] ^= 1;
    assert_eq!(
        reflect(&request, mode, &how(None), &mut out),
        Err(StampError::BadHmac)
    );
    let mut open = [0u8; 112];
    sender().write(Mode::Unauthenticated, &mut open).unwrap();
    assert_eq!(
        reflect(&open, mode, &how(None), &mut out),
        Err(StampError::BadHmac)
    );
}

/// Each TLV of the kind asked, in order and in place, past TLVs of other kinds; the walk
/// ends at a TLV that runs past the area, as `iter`'s does.
#[test]
fn for_each_of_rewrites_every_tlv_of_its_kind_in_place() {
    let mut area = vec![0u8; 64];
    let mut at = 0;
    for (kind, len) in [(7, 4), (3, 4), (7, 8)] {
        tlv::put(&mut area[at..], kind, len).unwrap();
        at += tlv::HEADER_BYTES + len;
    }
    // A header whose length runs past the end: no TLV of the kind after it is reached.
    area[at..at + 4].copy_from_slice(&[0, 7, 0, 200]);
    let mut seen = Vec::new();
    tlv::for_each_of(&mut area, 7, |a, at, len| {
        a[at + tlv::HEADER_BYTES..at + tlv::HEADER_BYTES + len].fill(0xee);
        seen.push((at, len));
    });
    assert_eq!(seen, [(0, 4), (16, 8)]);
    assert_eq!(&area[4..8], &[0xee; 4]);
    assert_eq!(&area[12..16], &[0; 4], "type 3 untouched");
    assert_eq!(&area[20..28], &[0xee; 8]);
}
