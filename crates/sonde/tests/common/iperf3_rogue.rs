//! A rogue iperf3 server's end of the control connection, for the red team: iperf3's
//! framing and the protocol's opening turns, so each attack writes only where it departs
//! from the protocol.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// One length-prefixed JSON frame read from `s`.
pub fn frame(s: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut b = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut b).unwrap();
    b
}

/// `json` as one length-prefixed frame.
pub fn send_frame(s: &mut TcpStream, json: &str) {
    s.write_all(&(json.len() as u32).to_be_bytes()).unwrap();
    s.write_all(json.as_bytes()).unwrap();
}

/// The next control connection on `l` taken to CREATE_STREAMS as a server does it: the
/// cookie read, PARAM_EXCHANGE, the parameters read, CREATE_STREAMS. The connection
/// (reads time out after `wait`) and the parameters' JSON.
pub fn agreed(l: &TcpListener, wait: Duration) -> (TcpStream, String) {
    let (mut c, _) = l.accept().unwrap();
    c.set_read_timeout(Some(wait)).unwrap();
    let mut cookie = [0u8; 37];
    c.read_exact(&mut cookie).unwrap();
    c.write_all(&[9]).unwrap();
    let params = String::from_utf8_lossy(&frame(&mut c)).into_owned();
    c.write_all(&[10]).unwrap();
    (c, params)
}
