//! A STAMP reflector fed arbitrary datagrams, unauthenticated and authenticated: it may
//! refuse, but never panics and never answers with other than as many bytes as came in;
//! the sender's readers and the TLV walk take the same bytes without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sonde_proto::stamp::{
    reflect, tlv, DscpPolicy, ErrorEstimate, Mode, Reflection, ReflectorPacket, SenderPacket, StampKey,
    SyncSource, Timestamp, TimestampInfo, TimestampMethod,
};

fuzz_target!(|data: &[u8]| {
    let key = StampKey::new(b"fuzzing key of some length").unwrap();
    let how = Reflection {
        seq: data.first().map(|&b| u32::from(b)),
        receive: Timestamp(1),
        transmit: Timestamp(2),
        estimate: ErrorEstimate::default(),
        ttl: 64,
        info: TimestampInfo {
            sync_in: SyncSource::Ntp,
            method_in: TimestampMethod::Software,
            sync_out: SyncSource::Ntp,
            method_out: TimestampMethod::Software,
        },
        boot_id: Some([0x5b; 16]),
        // The arrived TOS and the operator's DSCP policy from the input too, so the Class
        // of Service TLV's fill runs under every policy.
        tos: data.get(1).copied(),
        dscp_policy: match data.get(2) {
            Some(&b) if b & 1 == 1 => DscpPolicy::ANY,
            Some(&b) => DscpPolicy::allowing([b >> 2]),
            None => DscpPolicy::default(),
        },
    };
    let mut out = vec![0u8; data.len() + 16];
    for mode in [Mode::Unauthenticated, Mode::Authenticated(&key)] {
        if let Ok(len) = reflect(data, mode, &how, &mut out) {
            assert_eq!(len, data.len());
        }
        let _ = ReflectorPacket::read(data, mode);
        let _ = SenderPacket::read(data, mode);
    }
    for t in tlv::iter(data) {
        let _ = t;
    }
    let _ = TimestampInfo::find(data);
});
