//! Red team on STAMP's Class of Service TLV: an allowed sender whose requests arrive
//! unmarked asks `sonde serve --stamp` to send its answers as EF, CS6 or CS7. By default
//! the reflector refuses (the answer leaves CS0, the TLV says RPD 1); only the class the
//! request arrived with, CS0 or one the operator lists in --stamp-allow-dscp is granted.
//! Loopback only: the answer's TOS is read from the kernel (IP_RECVTOS).

use crate::common;

use std::io::BufRead;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::stamp_rogue::packet;
use common::*;
use sonde_proto::stamp::{tlv, ClassOfService, Mode, COS_BYTES};

/// `sonde serve --stamp 127.0.0.1:0` answering loopback, with `extra`; its port.
fn reflector(extra: &[&str]) -> (Child, u16) {
    let mut child = sonde_cmd()
        .args(["serve", "--bind", "127.0.0.1", "--port", "0"])
        .args(["--stamp", "127.0.0.1:0", "--stamp-allow", "127.0.0.1/32"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let port = lines.by_ref().map_while(Result::ok).find_map(|l| {
        let at = l.strip_prefix("sonde stamp reflector listening on 127.0.0.1:")?;
        at.split_whitespace().next()?.parse::<u16>().ok()
    });
    let Some(port) = port else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("serve --stamp did not listen");
    };
    std::thread::spawn(move || lines.for_each(drop));
    (child, port)
}

/// One request sent with TOS `sent`, its CoS TLV asking for `asked`: the answer's TOS as
/// it arrived and its filled TLV.
fn ask(port: u16, sent: u8, asked: u8) -> (u8, ClassOfService) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    sonde_engine::kstamps::datagram::enable_arrival(s.as_raw_fd(), false).unwrap();
    sonde_engine::marks::set_tos(s.as_raw_fd(), sent).unwrap();
    let mode = Mode::Unauthenticated;
    let mut p = packet(
        1,
        7,
        mode.base_bytes() + tlv::HEADER_BYTES + COS_BYTES,
        mode,
    );
    tlv::put(
        &mut p[mode.base_bytes()..],
        tlv::TYPE_CLASS_OF_SERVICE,
        COS_BYTES,
    )
    .unwrap()
    .copy_from_slice(&ClassOfService::asking(asked).to_bytes());
    let mut buf = [0u8; 512];
    for _ in 0..5 {
        s.send_to(&p, ("127.0.0.1", port)).unwrap();
        let got = sonde_engine::kstamps::datagram::recv_arrival(
            s.as_raw_fd(),
            &mut buf,
            Duration::from_millis(500),
        )
        .unwrap();
        if let Some(d) = got {
            let cos = tlv::class_of_service(&buf[mode.base_bytes()..d.len]).expect("a filled TLV");
            return (d.tos.expect("the answer's TOS"), cos);
        }
    }
    panic!("no answer");
}

const EF: u8 = 46;
const CS6: u8 = 48;
const CS7: u8 = 56;

#[test]
fn a_sender_cannot_make_the_reflector_emit_a_class_it_did_not_send() {
    let _serial = Serial::take();
    let (mut agent, port) = reflector(&[]);
    for dscp in [EF, CS6, CS7] {
        let (tos, cos) = ask(port, 0, dscp << 2 | 2);
        assert_eq!(
            tos >> 2,
            0,
            "DSCP {dscp} asked, arrived unmarked: answered CS0"
        );
        assert_eq!(tos & 3, 2, "the asked ECN is still applied");
        assert_eq!(
            (cos.dscp1, cos.rpd),
            (dscp, 1),
            "the refusal is told (RPD 1)"
        );
        assert_eq!(
            cos.answer_tos(),
            tos,
            "the TLV says the class actually used"
        );
    }
    // The class the request arrived with, and CS0, are granted.
    let (tos, cos) = ask(port, EF << 2, EF << 2);
    assert_eq!((tos >> 2, cos.rpd), (EF, 0));
    let (tos, cos) = ask(port, EF << 2, 0);
    assert_eq!((tos >> 2, cos.rpd), (0, 0));
    let _ = agent.kill();
    let _ = agent.wait();

    // The operator's list widens it, and only by what it lists.
    let (mut agent, port) = reflector(&["--stamp-allow-dscp", "ef"]);
    let (tos, cos) = ask(port, 0, EF << 2);
    assert_eq!((tos >> 2, cos.rpd), (EF, 0));
    let (tos, cos) = ask(port, 0, CS7 << 2);
    assert_eq!((tos >> 2, cos.rpd), (0, 1));
    let _ = agent.kill();
    let _ = agent.wait();

    // `any` is the reflector as it was before the policy: the attack's CS7 goes out.
    let (mut agent, port) = reflector(&["--stamp-allow-dscp", "any"]);
    let (tos, cos) = ask(port, 0, CS7 << 2);
    assert_eq!((tos >> 2, cos.rpd), (CS7, 0));
    let _ = agent.kill();
    let _ = agent.wait();
}
