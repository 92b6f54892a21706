//! What one TCP_INFO reading costs, the per-connection price of sampling every interval:
//! `cargo run --release -p sonde-engine --example tcp_info_cost` reads a loopback
//! connection's TCP_INFO a million times and prints the time per reading.

use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Instant;

use sonde_engine::tcp_info::tcp_info;

fn main() {
    let l = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    let c = TcpStream::connect(l.local_addr().unwrap()).expect("a loopback connection");
    let _s = l.accept().unwrap();
    let n = 1_000_000;
    let t = Instant::now();
    let mut cwnd = 0u64;
    for _ in 0..n {
        cwnd += tcp_info(c.as_raw_fd()).map_or(0, |i| i.snd_cwnd as u64);
    }
    let per = t.elapsed().as_secs_f64() / n as f64;
    println!(
        "{:.0} ns per TCP_INFO reading ({n} readings, cwnd sum {cwnd})",
        per * 1e9
    );
}
