//! A rogue STAMP sender's tools, for the attacks on `sonde serve --stamp`: a socket in
//! the client namespace, sender packets built by the library's own codec, and what came
//! back.

use std::net::UdpSocket;
use std::time::Duration;

use sonde_proto::stamp::{Mode, SenderPacket};

use super::Lab;

/// A socket in the client namespace bound to `addr`: the namespace is entered on a thread
/// of its own, whose sockets keep it; reads wait 300 ms.
pub fn socket_in(lab: &Lab, addr: &str) -> UdpSocket {
    let addr = addr.to_string();
    super::rogue::in_netns(&lab.client, move || {
        let s = UdpSocket::bind(format!("{addr}:0")).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        s
    })
}

/// A sender packet of `len` bytes (cut or zero-padded) stamped now.
pub fn packet(seq: u32, ssid: u16, len: usize, mode: Mode) -> Vec<u8> {
    let mut p = vec![0u8; len.max(mode.base_bytes())];
    let sender = SenderPacket {
        seq,
        ssid,
        timestamp: super::ntp_now(),
        ..Default::default()
    };
    sender.write(mode, &mut p).unwrap();
    p.truncate(len);
    p
}

/// Every datagram waiting on `s` (until 300 ms pass with none): their lengths.
pub fn answers(s: &UdpSocket) -> Vec<usize> {
    let mut buf = [0u8; 65536];
    let mut got = Vec::new();
    while let Ok(n) = s.recv(&mut buf) {
        got.push(n);
    }
    got
}
