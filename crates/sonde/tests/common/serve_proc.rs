//! A `sonde serve` a test starts on loopback and waits for: its stderr read until the line
//! saying it listens (the rest drained, so it never blocks on a full pipe).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use super::sonde_cmd;

/// Spawns `cmd` (stdin and stdout closed, stderr piped) and reads its stderr until `found`
/// takes a line; that value. A server that exits first is killed and the test fails,
/// naming `what`.
pub fn until_listening<T>(
    mut cmd: Command,
    what: &str,
    mut found: impl FnMut(&str) -> Option<T>,
) -> (Child, T) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let value = lines.by_ref().map_while(Result::ok).find_map(|l| found(&l));
    let Some(value) = value else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{what} did not listen");
    };
    std::thread::spawn(move || lines.for_each(drop));
    (child, value)
}

/// `sonde serve --iperf3 127.0.0.1:PORT` with `extra`, listening once it returns (its
/// stderr said so; no probe connection, which would be a silent client holding the slot).
pub fn iperf3_on_loopback(port: u16, extra: &[&str]) -> Child {
    let mut cmd = sonde_cmd();
    cmd.args(["serve", "--bind", "127.0.0.1", "--port", "0"])
        .args(["--iperf3", &format!("127.0.0.1:{port}")])
        .args(extra);
    let listening = |l: &str| l.contains("sonde iperf3 server listening").then_some(());
    until_listening(cmd, "serve --iperf3", listening).0
}

/// The resident memory of process `pid`, in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// A process killed on drop unless it already ended: a failed assertion leaves none
/// running on (in a namespace deleted under it).
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
