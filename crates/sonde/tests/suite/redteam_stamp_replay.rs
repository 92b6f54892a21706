//! Red team on `sonde serve --stamp`'s sessions (issue 52: M1, M5, L1): one captured
//! authenticated packet replayed at 1,000/s from its sender's address, from rotating ports
//! and from the sender's own port; one allowed host, then 70 addresses inside the
//! allowlist, opening stateful sessions until the table is full, before a new sender asks.

use crate::common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::*;
use sonde_proto::stamp::{Mode, ReflectorPacket, SenderPacket, StampKey, TimeFormat, Timestamp};

const STAMP_PORT: u16 = 8623;
const KEY_HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn reflector() -> String {
    format!("{SERVER_ADDR}:{STAMP_PORT}")
}

fn key() -> StampKey {
    StampKey::new(&hex::decode(KEY_HEX).unwrap()).unwrap()
}

fn socket_in(lab: &Lab, addr: &str) -> UdpSocket {
    let addr = addr.to_string();
    common::rogue::in_netns(&lab.client, move || {
        let s = UdpSocket::bind(format!("{addr}:0")).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(2))).unwrap();
        s
    })
}

/// The realtime clock, `ago` back, as an NTP timestamp.
fn stamped(ago: Duration) -> Timestamp {
    let now = std::time::SystemTime::now() - ago;
    let ns = now
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    Timestamp::from_unix_ns(ns, TimeFormat::Ntp)
}

/// A test packet of `len` bytes, sent `ago`.
fn packet(seq: u32, ssid: u16, len: usize, mode: Mode, ago: Duration) -> Vec<u8> {
    let mut p = vec![0u8; len.max(mode.base_bytes())];
    let sender = SenderPacket {
        seq,
        ssid,
        timestamp: stamped(ago),
        ..Default::default()
    };
    sender.write(mode, &mut p).unwrap();
    p
}

/// Every answer waiting on `s`: (the sender's number, the reflector's).
fn numbers(s: &UdpSocket, mode: Mode) -> Vec<(u32, u32)> {
    let mut buf = [0u8; 2048];
    let mut got = Vec::new();
    while let Ok(n) = s.recv(&mut buf) {
        let a = ReflectorPacket::read(&buf[..n], mode).unwrap();
        got.push((a.sender_seq, a.seq));
    }
    got
}

fn agent_with(lab: &Lab, args: &[&str]) -> Agent {
    let bind = reflector();
    let mut all = vec!["--stamp", bind.as_str(), "--stamp-stateful"];
    all.extend_from_slice(args);
    lab.start_agent_with(&all)
}

/// M1. The keyed sender's first packet (140 bytes), captured, is replayed by a keyless
/// rogue 1,000 times in about a second, a third each from another port of the sender's
/// address, from a new port every time, and from the sender's own port, while the sender
/// sends its 50 (50/s, `--stamp-max-pps 100`). Before the fix the replays were answered:
/// they spent the address's answers and, from the sender's own port, took numbers of its
/// session (its answers' numbers jumped: loss on the way back forged) and came back as
/// duplicates. Then a packet of the key stamped an hour ago, and one from 11 s ahead.
#[test]
fn redteam_stamp_a_captured_packet_replayed_1000_times_is_answered_once() {
    let key_path = temp_file("redteam-stamp-replay-key");
    std::fs::write(&key_path, format!("{KEY_HEX}\n")).unwrap();
    std::fs::set_permissions(
        &key_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let Some(lab) = Lab::new() else { return };
    let allow = format!("{CLIENT_ADDR}/32");
    let _agent = agent_with(
        &lab,
        &["--stamp-allow", &allow, "--stamp-key-file"]
            .into_iter()
            .chain([key_path.to_str().unwrap(), "--stamp-max-pps", "100"])
            .collect::<Vec<_>>(),
    );
    let key = key();
    let mode = Mode::Authenticated(&key);
    let sender = socket_in(&lab, CLIENT_ADDR);
    let captured = packet(0, 0x5e55, 140, mode, Duration::ZERO);
    let same_address = socket_in(&lab, CLIENT_ADDR);
    let rotating: Vec<UdpSocket> = (0..334).map(|_| socket_in(&lab, CLIENT_ADDR)).collect();
    let own_port = sender.try_clone().unwrap();
    sender.send_to(&captured, reflector()).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let replay = {
        let (captured, to) = (captured.clone(), reflector());
        let same = same_address.try_clone().unwrap();
        let rotating: Vec<UdpSocket> = rotating.iter().map(|s| s.try_clone().unwrap()).collect();
        std::thread::spawn(move || {
            let start = Instant::now();
            for i in 0..1000usize {
                let s = match i % 3 {
                    0 => &same,
                    1 => &rotating[i / 3],
                    _ => &own_port,
                };
                let _ = s.send_to(&captured, &to);
                let due = start + Duration::from_millis(i as u64 + 1);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
            start.elapsed()
        })
    };
    let mut got = numbers(&sender, mode);
    for seq in 1..50 {
        let started = Instant::now();
        let p = packet(seq, 0x5e55, 140, mode, Duration::ZERO);
        sender.send_to(&p, reflector()).unwrap();
        while started.elapsed() < Duration::from_millis(20) {
            got.extend(numbers(&sender, mode));
        }
    }
    let took = replay.join().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    got.extend(numbers(&sender, mode));
    let to_rogues: usize = numbers(&same_address, mode).len()
        + rotating
            .iter()
            .map(|s| numbers(s, mode).len())
            .sum::<usize>();
    // The key's packets from an hour ago and from 11 s ahead: outside the bound.
    let (old, ahead) = (
        packet(1000, 0x5e55, 112, mode, Duration::from_secs(3600)),
        {
            let mut p = vec![0u8; 112];
            let ns = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                + 11_000_000_000;
            let sp = SenderPacket {
                seq: 1001,
                ssid: 0x5e55,
                timestamp: Timestamp::from_unix_ns(ns, TimeFormat::Ntp),
                ..Default::default()
            };
            sp.write(mode, &mut p).unwrap();
            p
        },
    );
    sender.send_to(&old, reflector()).unwrap();
    sender.send_to(&ahead, reflector()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let stale = numbers(&sender, mode).len();
    let sender_seqs: Vec<u32> = got.iter().map(|(s, _)| *s).collect();
    let reflector_seqs: Vec<u32> = got.iter().map(|(_, r)| *r).collect();
    eprintln!(
        "1,000 replays of one 140-byte packet in {:.2} s: the sender's 50 got {} answers (reflector numbers {:?}..{:?}, {} duplicates of its first), {to_rogues} answers to the rogue's ports; stale packets answered: {stale}",
        took.as_secs_f64(),
        got.len(),
        reflector_seqs.first(),
        reflector_seqs.last(),
        sender_seqs.iter().filter(|s| **s == 0).count().saturating_sub(1)
    );
    assert!(took < Duration::from_secs(3), "the replay took {took:?}");
    assert_eq!(
        sender_seqs,
        (0..50).collect::<Vec<u32>>(),
        "the sender's answers"
    );
    assert_eq!(
        reflector_seqs,
        (0..50).collect::<Vec<u32>>(),
        "the reflector's numbers: a gap is loss on the way back"
    );
    assert_eq!(to_rogues, 0, "replays from other ports answered");
    assert_eq!(stale, 0, "a packet outside the time bound answered");
}

/// Numbers answered to a new sender's 20 packets (SSID 1, from `from`).
fn newcomer(lab: &Lab, from: &str) -> Vec<u32> {
    let s = socket_in(lab, from);
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    for seq in 0..20 {
        let p = packet(seq, 1, 44, Mode::Unauthenticated, Duration::ZERO);
        s.send_to(&p, reflector()).unwrap();
        if let Ok(n) = s.recv(&mut buf) {
            got.push(
                ReflectorPacket::read(&buf[..n], Mode::Unauthenticated)
                    .unwrap()
                    .seq,
            );
        }
    }
    got
}

/// `count` packets from `s`, each naming a new session (SSID), 50 at a time, each batch's
/// answers awaited (100 ms at most) so that none is lost in a socket's buffer: the number
/// answered.
fn open_sessions(s: &UdpSocket, count: u16) -> usize {
    let mut answered = 0;
    let mut buf = [0u8; 256];
    for batch in (0..count).collect::<Vec<_>>().chunks(50) {
        for ssid in batch {
            let p = packet(0, 1000 + ssid, 44, Mode::Unauthenticated, Duration::ZERO);
            let _ = s.send_to(&p, reflector());
        }
        let (until, mut got) = (Instant::now() + Duration::from_millis(100), 0);
        while got < batch.len() && Instant::now() < until {
            if s.recv(&mut buf).is_ok() {
                got += 1;
            }
        }
        answered += got;
    }
    answered
}

/// M5 and L1. A stateful reflector (unauthenticated, `--stamp-max-pps 100000`) for the
/// client's /24: one allowed host opens 4,200 sessions (the table holds 4,096), then a new
/// sender from another allowed address sends 20; then 70 more allowed addresses (spoofed
/// sources inside the allowlist) open 64 each, 4,480 in all, and a third sender asks.
/// Before the fix a full table refused every new session: 0 of 20.
#[test]
fn redteam_stamp_a_host_or_70_addresses_filling_the_sessions_lock_no_sender_out() {
    let Some(lab) = Lab::new() else { return };
    let extra: Vec<String> = (100..170).map(|i| format!("198.18.0.{i}")).collect();
    let newcomers = [
        common::data_rogue::OTHER_ADDR.to_string(),
        "198.18.0.99".to_string(),
    ];
    for a in extra.iter().chain(&newcomers) {
        lab.client_cmd(
            "ip",
            &["addr", "add", &format!("{a}/24"), "dev", &lab.client_if],
        );
    }
    let _agent = agent_with(
        &lab,
        &[
            "--stamp-allow",
            "198.18.0.0/24",
            "--stamp-max-pps",
            "100000",
        ],
    );
    let host = socket_in(&lab, CLIENT_ADDR);
    let start = Instant::now();
    let host_answered = open_sessions(&host, 4200);
    let one_host = start.elapsed();
    std::thread::sleep(Duration::from_millis(100));
    let after_one = newcomer(&lab, common::data_rogue::OTHER_ADDR);
    let many: Vec<UdpSocket> = extra.iter().map(|a| socket_in(&lab, a)).collect();
    let start = Instant::now();
    let many_answered: usize = many.iter().map(|s| open_sessions(s, 64)).sum();
    let spoofed = start.elapsed();
    std::thread::sleep(Duration::from_millis(100));
    let after_many = newcomer(&lab, "198.18.0.99");
    eprintln!(
        "4,200 sessions from one host in {:.2} s ({host_answered} answered), then a new sender: {} of 20 answered; 4,480 from 70 addresses in {:.2} s ({many_answered} answered), then another: {} of 20",
        one_host.as_secs_f64(),
        after_one.len(),
        spoofed.as_secs_f64(),
        after_many.len()
    );
    // Enough of them reached the reflector to fill its 4,096 sessions.
    assert!(
        host_answered >= 4096 && many_answered >= 4096,
        "{host_answered} {many_answered}"
    );
    let all: Vec<u32> = (0..20).collect();
    assert_eq!(after_one, all, "after one host filled the table");
    assert_eq!(after_many, all, "after 70 addresses filled the table");
}

/// Sends `payload` as a UDP datagram from `src` (any address: a raw socket writes its IP
/// header) to the reflector.
fn send_spoofed(fd: i32, src: std::net::Ipv4Addr, payload: &[u8]) {
    let dst: std::net::Ipv4Addr = SERVER_ADDR.parse().unwrap();
    let mut p = vec![0u8; 28 + payload.len()];
    p[0] = 0x45;
    let total = p.len() as u16;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[8] = 64;
    p[9] = libc::IPPROTO_UDP as u8;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    p[20..22].copy_from_slice(&40000u16.to_be_bytes());
    p[22..24].copy_from_slice(&STAMP_PORT.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[28..].copy_from_slice(payload);
    let to = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(dst.octets()),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: a live raw socket, a buffer of p.len() bytes, a sockaddr_in of its size.
    unsafe {
        libc::sendto(
            fd,
            p.as_ptr().cast(),
            p.len(),
            0,
            (&to as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
    }
}

/// L1. 6,000 sources spoofed inside the allowlist (198.18.64.0 upward, from a raw socket:
/// their answers go nowhere) ask once each within about a second, against `--stamp-max-pps
/// 1`; then a new sender from the client's address asks 5 times. Before the fix the
/// 4,096-source table was full of sources heard in the last 10 s: nothing for the newcomer.
#[test]
fn redteam_stamp_6000_spoofed_sources_lock_no_newcomer_out() {
    let Some(lab) = Lab::new() else { return };
    let bind = reflector();
    let _agent = lab.start_agent_with(&[
        "--stamp",
        &bind,
        "--stamp-allow",
        "198.18.0.0/16",
        "--stamp-max-pps",
        "1",
    ]);
    // SAFETY: a raw socket (IPPROTO_RAW: the IP header is ours), closed below.
    let fd = common::data_rogue::in_netns(&lab.client, || unsafe {
        libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW)
    });
    assert!(fd >= 0, "a raw socket: {}", std::io::Error::last_os_error());
    let payload = packet(0, 1, 44, Mode::Unauthenticated, Duration::ZERO);
    let start = Instant::now();
    for i in 0..6000u32 {
        send_spoofed(fd, std::net::Ipv4Addr::from(0xc612_4000 + i), &payload);
        if i % 100 == 99 {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let took = start.elapsed();
    // SAFETY: the socket opened above.
    unsafe { libc::close(fd) };
    std::thread::sleep(Duration::from_millis(100));
    let s = socket_in(&lab, CLIENT_ADDR);
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 256];
    let mut got = 0;
    for seq in 0..5 {
        let p = packet(seq, 1, 44, Mode::Unauthenticated, Duration::ZERO);
        s.send_to(&p, reflector()).unwrap();
        got += usize::from(s.recv(&mut buf).is_ok());
    }
    eprintln!(
        "6,000 spoofed sources in {:.2} s, then a newcomer: {got} of 5 answered (1 a second allowed)",
        took.as_secs_f64()
    );
    assert!(got >= 1, "the newcomer was refused");
}
