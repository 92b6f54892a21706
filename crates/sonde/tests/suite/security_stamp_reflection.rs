//! Issue 52 L2: how much `serve --stamp` reflects to addresses inside its `--stamp-allow`
//! that a rogue spoofs (answers go to whoever owns the source address). The bound is
//! `--stamp-max-pps` per address (a second's worth in a burst) times the addresses, each
//! answer exactly the request's bytes: no more than the rogue itself sends. Here 32
//! victims of one /27, each owning its address and counting what reaches it, are sent
//! four times their rate.

use crate::common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::*;
use sonde_proto::stamp::{Mode, SenderPacket};

const STAMP_PORT: u16 = 8620;
/// Victims: 198.18.0.64/27, as many as the red team's.
const VICTIMS: u8 = 32;
/// Requests a second to each victim's address, for a second.
const OFFERED: u32 = 400;
/// The reflector's `--stamp-max-pps` (its default).
const PER_S: u32 = 100;
const BYTES: usize = 1400;

/// Room for every answer until the victim counts them (the default 208 KiB held 92 of
/// 1,400 bytes): SO_RCVBUFFORCE, past rmem_max, as root.
fn force_receive_buffer(s: &UdpSocket, bytes: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: a c_int option value that lives for the call, on a socket we own.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
}

#[test]
fn reflection_to_spoofed_listed_addresses_is_the_rate_per_address_and_no_byte_more() {
    let Some(lab) = Lab::new() else { return };
    let victims: Vec<String> = (0..VICTIMS)
        .map(|i| format!("198.18.0.{}", 64 + i))
        .collect();
    for v in &victims {
        let cidr = format!("{v}/24");
        lab.client_cmd("ip", &["addr", "add", &cidr, "dev", &lab.client_if]);
    }
    let bind = format!("{SERVER_ADDR}:{STAMP_PORT}");
    let _agent = lab.start_agent_with(&["--stamp", &bind, "--stamp-allow", "198.18.0.64/27"]);
    let sockets: Vec<UdpSocket> = victims
        .iter()
        .map(|v| {
            common::data_rogue::in_netns(&lab.client, || {
                let s = UdpSocket::bind(format!("{v}:0")).unwrap();
                s.connect(&bind).unwrap();
                force_receive_buffer(&s, 4 << 20);
                s.set_read_timeout(Some(Duration::from_millis(300)))
                    .unwrap();
                s
            })
        })
        .collect();
    let mut p = vec![0u8; BYTES];
    SenderPacket::default()
        .write(Mode::Unauthenticated, &mut p)
        .unwrap();
    // Each victim's address sends OFFERED requests over about a second (bounded).
    let start = Instant::now();
    let mut sent = 0u64;
    for round in 0..OFFERED {
        let due = start + Duration::from_secs(1) * round / OFFERED;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        for s in &sockets {
            if s.send(&p).is_ok() {
                sent += 1;
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(200));
    let mut buf = vec![0u8; 65536];
    let per_victim: Vec<(u64, u64)> = sockets
        .iter()
        .map(|s| {
            let (mut n, mut bytes) = (0u64, 0u64);
            while let Ok(len) = s.recv(&mut buf) {
                n += 1;
                bytes += len as u64;
            }
            (n, bytes)
        })
        .collect();
    let answers: u64 = per_victim.iter().map(|v| v.0).sum();
    let bytes: u64 = per_victim.iter().map(|v| v.1).sum();
    // A second's burst and the rate over the sending and the drain: the bound per address.
    let most = u64::from(PER_S) + (f64::from(PER_S) * (elapsed + 0.2)).ceil() as u64;
    eprintln!(
        "FIGURE {VICTIMS} listed addresses sent {OFFERED}/s each for {elapsed:.2} s ({sent} requests of {BYTES} B, {:.1} MB): {answers} answers, {:.2} MB reflected, {}-{} per address (bound {most}: --stamp-max-pps {PER_S} and its burst)",
        (sent * BYTES as u64) as f64 / 1e6,
        bytes as f64 / 1e6,
        per_victim.iter().map(|v| v.0).min().unwrap(),
        per_victim.iter().map(|v| v.0).max().unwrap(),
    );
    assert!(
        sent >= u64::from(VICTIMS) * u64::from(OFFERED) * 9 / 10,
        "{sent} sent"
    );
    for (v, (n, b)) in victims.iter().zip(&per_victim) {
        assert!(
            *n >= u64::from(PER_S) && *n <= most,
            "{v}: {n} answers, at most {most}"
        );
        assert_eq!(
            *b,
            n * BYTES as u64,
            "{v}: answers of another size than the request"
        );
    }
    assert!(answers <= u64::from(VICTIMS) * most);
}
