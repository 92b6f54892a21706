//! What the mesh (`sonde serve --mesh`) adds to STAMP: its key, derived from the fleet key
//! (agents sharing the key answer each other's probes and nothing else does, and a STAMP
//! HMAC can never pass as a control-protocol proof), and a Labels TLV (private-use type
//! [`TYPE_LABELS`]) in which a reflector answers its own `--label`s, so that a peer found
//! by DNS is labelled by its own zone and rack. The sender reserves the room (the answer
//! is never larger than the probe) and the HMAC TLV after it covers it.
//!
//! Each packet is signed under a key of the addresses it names: a probe under the key of
//! the address it leaves from and the reflector's it is sent to ([`probe_key`]), an answer
//! under the reflector's address key ([`address_key`]). A probe or an answer re-sent from
//! any other address does not check there, so a captured probe reflects to no spoofed
//! third party and a captured answer counts for no other peer; and a probe re-sent to
//! another reflector does not check there either, so it can neither take that reflector's
//! answers from its sender nor move the window of its sender's session there.

#[cfg(test)]
mod departure_tests;
#[cfg(test)]
mod follow_up_tests;
mod held;
pub mod marks;
pub mod peers;
pub mod prober;
#[cfg(test)]
mod prober_tests;
#[cfg(test)]
mod test_machine;

pub use held::Reflections;
pub use marks::put_labels_request;

pub use peers::{Peer, PeerEntry, Peers};
pub use prober::{
    Clocks, Departures, ListChange, Listed, Matched, Probe, Prober, ProberConfig, Unreachable,
};

use crate::labels::{self, Labels, MAX_LABELS};
use crate::stamp::StampKey;
use crate::stamp::{self, follow_up, tlv, FollowUp, Mode, Reflection, SenderPacket, StampError};
use crate::Key;

/// The Labels TLV's type: RFC 8972's private-use range (252-254).
pub const TYPE_LABELS: u8 = 252;
/// Bytes a sender reserves for the reflector's labels (`k=v` lines, whole ones only).
pub const LABELS_ROOM: usize = 256;

/// The STAMP key every agent holding `key` derives alike.
pub fn stamp_key(key: &Key) -> StampKey {
    use hmac::Mac;
    let derived = key.mac(&[b"mesh-stamp-key"]).finalize().into_bytes();
    StampKey::new(&derived).expect("32 bytes exceed the minimum")
}

/// The key the packets sent from `ip` carry: HMAC(mesh key, "sonde mesh probe" || the
/// address's bytes; an IPv4-mapped IPv6 address is its IPv4 one).
pub fn address_key(mesh: &StampKey, ip: std::net::IpAddr) -> StampKey {
    match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => mesh.derive(&[b"sonde mesh probe", &v4.octets()]),
        std::net::IpAddr::V6(v6) => mesh.derive(&[b"sonde mesh probe", &v6.octets()]),
    }
}

/// The key of the probes sent from `from` to the reflector at `to`: HMAC(mesh key, "sonde
/// mesh probe to" || from's bytes || to's bytes), IPv4-mapped addresses as IPv4 ones.
pub fn probe_key(mesh: &StampKey, from: std::net::IpAddr, to: std::net::IpAddr) -> StampKey {
    let bytes = |ip: std::net::IpAddr| match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
        std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    mesh.derive(&[b"sonde mesh probe to", &bytes(from), &bytes(to)])
}

/// What a mesh reflector writes into an answer besides the codec's fields.
#[derive(Debug, Clone, Copy)]
pub struct Own<'a> {
    /// Its `--label`s, for a Labels TLV.
    pub labels: &'a Labels,
    /// Its session's last answer's real departure, for a Follow-Up Telemetry TLV.
    pub told: Option<FollowUp>,
}

/// The mesh reflector's answer to `request`, read already under `mode` (`asked`), in
/// `out`: the codec's (`stamp::reflect_read`) with `own`'s labels and follow-up in their
/// TLVs, the TLVs' HMAC checked once and signed once under `answer`. Its length, and
/// whether the probe asked for a follow-up (only then is the answer's departure worth a
/// stamp).
pub fn reflect_probe(
    asked: &SenderPacket,
    request: &[u8],
    modes: (Mode<'_>, Mode<'_>),
    how: &Reflection,
    own: Own<'_>,
    out: &mut [u8],
) -> Result<(usize, bool), StampError> {
    let mut wants = false;
    let more = |area: &mut [u8], checked| {
        fill_labels(area, own.labels);
        wants = follow_up::fill(area, own.told, checked);
    };
    let n = stamp::reflect_read(asked, request, modes.0, modes.1, how, out, more)?;
    Ok((n, wants))
}

/// A reflector's pass over its answer's TLVs `area`, inside the codec's
/// (`stamp::reflect_read`, which signs them after it): fills each Labels TLV with `own`
/// (whole `k=v` lines that fit) and clears the U flag the codec set on this type.
pub fn fill_labels(area: &mut [u8], own: &Labels) {
    tlv::for_each_of(area, TYPE_LABELS, |area, at, len| {
        area[at] &= !tlv::FLAG_UNRECOGNIZED;
        let value = &mut area[at + tlv::HEADER_BYTES..at + tlv::HEADER_BYTES + len];
        value.fill(0);
        let mut used = 0;
        for (k, v) in own {
            let line = format!("{k}={v}\n");
            if used + line.len() > len {
                break;
            }
            value[used..used + line.len()].copy_from_slice(line.as_bytes());
            used += line.len();
        }
    });
}

/// The labels a reflector answered in its TLVs (keyed, only under their HMAC TLV: whoever
/// holds its address could write any), each checked as a `--label` is; `None` when there
/// are none.
pub fn read_labels(tlvs: tlv::Checked<'_>) -> Option<Labels> {
    let t = tlv::iter(tlvs.area())
        .map_while(Result::ok)
        .find(|t| t.kind == TYPE_LABELS && t.flags & tlv::FLAG_UNRECOGNIZED == 0)?;
    let text = std::str::from_utf8(t.value).ok()?.trim_end_matches('\0');
    let mut out = Labels::new();
    for line in text.lines().take(MAX_LABELS) {
        let (k, v) = line.split_once('=')?;
        labels::check(k, v).ok()?;
        out.insert(k.to_string(), v.to_string());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stamp::{reflect_read, Mode, Reflection, SenderPacket, AUTH_BASE_BYTES};

    fn own() -> Labels {
        [("rack", "r2"), ("zone", "b")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_reflector_answers_its_labels_signed_and_no_byte_more() {
        let k = stamp_key(&Key::from_file_bytes(b"0123456789abcdef-fleet").unwrap());
        let mut probe = vec![0u8; AUTH_BASE_BYTES + 400];
        SenderPacket {
            seq: 5,
            ..Default::default()
        }
        .write(Mode::Authenticated(&k), &mut probe)
        .unwrap();
        let n = AUTH_BASE_BYTES
            + put_labels_request(&mut probe[AUTH_BASE_BYTES..], Some(&k), 5).unwrap();
        let probe = &probe[..n];
        let how = Reflection {
            seq: Some(9),
            receive: Default::default(),
            transmit: Default::default(),
            estimate: crate::stamp::ErrorEstimate::from_bits(0),
            ttl: 255,
            info: crate::stamp::TimestampInfo::from_value(&[1, 2, 1, 2]).unwrap(),
            boot_id: Some([9; 16]),
            tos: None,
            dscp_policy: Default::default(),
        };
        let mut out = vec![0u8; 1024];
        let mode = Mode::Authenticated(&k);
        let asked = SenderPacket::read(probe, mode).unwrap();
        let more = |area: &mut [u8], _| fill_labels(area, &own());
        let len = reflect_read(&asked, probe, mode, mode, &how, &mut out, more).unwrap();
        assert_eq!(len, probe.len(), "never more bytes than came");
        let area = &out[AUTH_BASE_BYTES..len];
        let read = |area, k: &StampKey, seq| read_labels(tlv::Checked::new(area, Some(k), seq)?);
        assert_eq!(
            read(area, &k, 9),
            Some(own()),
            "signed after the labels went in"
        );
        assert_eq!(
            tlv::find_boot_id(area),
            Some([9; 16]),
            "its boot id, signed"
        );
        // Under another key, or another sequence number, nothing is believed.
        let other = stamp_key(&Key::from_file_bytes(b"0123456789abcdef-other").unwrap());
        assert_eq!(read(area, &other, 9), None);
        assert_eq!(read(area, &k, 10), None);
        // A label that breaks the rules is no label set at all.
        let mut bad = area.to_vec();
        let at = bad.windows(4).position(|w| w == b"rack").unwrap();
        bad[at..at + 4].copy_from_slice(b"__ra");
        assert_eq!(read_labels(tlv::Checked::new(&bad, None, 9).unwrap()), None);
    }

    /// A peer answering a right-to-left override (U+202E) or a zero-width joiner (U+200D)
    /// in its labels, signed or not, gets none into the metrics.
    #[test]
    fn a_peers_labels_with_format_characters_are_not_believed() {
        let k = stamp_key(&Key::from_file_bytes(b"0123456789abcdef-fleet").unwrap());
        for value in ["r\u{202E}1", "r\u{200D}1"] {
            let mut area = vec![0u8; 400];
            let n = put_labels_request(&mut area, Some(&k), 9).unwrap();
            let own: Labels = [("rack".to_string(), value.to_string())].into();
            fill_labels(&mut area[..n], &own);
            // Signed again over the labels, as a reflector does.
            let hmac_at = n - tlv::HEADER_BYTES - crate::stamp::HMAC_BYTES;
            tlv::put_hmac(&mut area, hmac_at, &k, 9).unwrap();
            let tlvs = tlv::Checked::new(&area[..n], Some(&k), 9).expect("signed");
            assert_eq!(read_labels(tlvs), None, "{value:?}");
        }
    }

    #[test]
    fn each_address_has_its_own_key_and_a_mapped_address_its_ipv4_ones() {
        let k = stamp_key(&Key::from_file_bytes(b"0123456789abcdef-fleet").unwrap());
        let a = address_key(&k, "198.18.1.1".parse().unwrap());
        let tag = a.mac(&[b"probe"]);
        let same = address_key(&k, "::ffff:198.18.1.1".parse().unwrap());
        assert!(same.verify(&[b"probe"], &tag));
        for other in ["198.18.1.2", "::1", "198.18.1.1"] {
            let ip = other.parse().unwrap();
            let key = if other == "198.18.1.1" {
                // The same address under another fleet's key.
                let f = Key::from_file_bytes(b"0123456789abcdef-other").unwrap();
                address_key(&stamp_key(&f), ip)
            } else {
                address_key(&k, ip)
            };
            assert!(!key.verify(&[b"probe"], &tag), "{other}");
        }
        assert!(!k.verify(&[b"probe"], &tag), "the mesh key itself");
    }

    /// A probe's key names both ends, in order: another reflector, another sender, the
    /// way back, or the sender's address key alone do not check it.
    #[test]
    fn a_probe_key_names_its_sender_and_its_reflector() {
        let k = stamp_key(&Key::from_file_bytes(b"0123456789abcdef-fleet").unwrap());
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let (a, b, c) = (ip("198.18.1.1"), ip("198.18.1.2"), ip("198.18.1.3"));
        let tag = probe_key(&k, a, b).mac(&[b"probe"]);
        let mapped = probe_key(&k, ip("::ffff:198.18.1.1"), ip("::ffff:198.18.1.2"));
        assert!(mapped.verify(&[b"probe"], &tag));
        for other in [
            probe_key(&k, a, c),
            probe_key(&k, c, b),
            probe_key(&k, b, a),
            address_key(&k, a),
        ] {
            assert!(!other.verify(&[b"probe"], &tag));
        }
    }

    #[test]
    fn agents_with_one_key_derive_one_stamp_key_and_another_key_differs() {
        let a = Key::from_file_bytes(b"0123456789abcdef-fleet").unwrap();
        let b = Key::from_file_bytes(b"0123456789abcdef-other").unwrap();
        let tag = stamp_key(&a).mac(&[b"probe"]);
        assert!(stamp_key(&a.clone()).verify(&[b"probe"], &tag));
        assert!(!stamp_key(&b).verify(&[b"probe"], &tag));
    }
}
