//! A `sonde serve` a test starts on loopback and waits for: its stderr read until the line
//! saying it listens (the rest drained, so it never blocks on a full pipe).

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{sonde_cmd, Lab, SERVER_ADDR, SONDE};

/// Spawns `cmd` (stdin and stdout closed, stderr piped) and reads its stderr until `found`
/// takes a line; that value. A server that exits first is killed and the test fails,
/// naming `what`.
pub fn until_listening<T>(
    cmd: Command,
    what: &str,
    mut found: impl FnMut(&str) -> Option<T>,
) -> (Child, T) {
    let mut child = spawn_for_stderr(cmd);
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

/// `cmd` spawned with stdin and stdout closed and stderr piped, for the caller to read.
fn spawn_for_stderr(mut cmd: Command) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// For a test of `serve --iperf3` on loopback (`None`: no iperf3 here, skip): the timing
/// lock, a free port and the server on it.
pub fn iperf3_loopback_test() -> Option<(super::Serial, u16, Child)> {
    if !super::need_tools(&["iperf3"]) {
        return None;
    }
    let serial = super::Serial::take();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    Some((serial, port, iperf3_on_loopback(port, &[])))
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

/// Whether `serve --iperf3` is done with `s` (non-blocking look): any byte
/// (ACCESS_DENIED) or the close.
pub fn iperf3_closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 16];
    match s.read(&mut b) {
        Ok(n) => n <= b.len(),
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// A real `iperf3 -c -t 1` bound to `from`, to the `serve --iperf3` on loopback `port`
/// while `attack` (`behind`) runs, served within `limit` or the test fails; then `stop`
/// set, the attack joined and `server` stopped. How long the client took, and what the
/// attack returned.
pub fn iperf3_served_beside<T: std::fmt::Display>(
    port: u16,
    (from, limit): (&str, Duration),
    (stop, attack, behind): (&AtomicBool, JoinHandle<T>, &str),
    server: Child,
) -> (Duration, T) {
    let (took, opened, status) = iperf3_client_beside(port, from, limit, (stop, attack), server);
    let status = status.unwrap_or_else(|| {
        panic!("iperf3 -c not served in {took:?} behind {behind} ({opened} connections)")
    });
    assert!(status.success(), "iperf3 -c: {status}");
    (took, opened)
}

fn iperf3_client_beside<T>(
    port: u16,
    from: &str,
    limit: Duration,
    (stop, attack): (&AtomicBool, JoinHandle<T>),
    mut server: Child,
) -> (Duration, T, Option<ExitStatus>) {
    let t = Instant::now();
    let mut real = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-B", from, "-p", &port.to_string()])
        .args(["-t", "1", "-J"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let status = super::wait_with_timeout(&mut real, limit);
    let took = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    let opened = attack.join().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    if status.is_none() {
        let _ = real.kill();
        let _ = real.wait();
    }
    (took, opened, status)
}

/// `sonde serve --iperf3` on port 5201 in the lab's server namespace, with `extra`: its
/// stderr lines, read as they come; killed when dropped, also when the test fails (ci13:
/// a failed assertion left one serving for an hour after its namespace was gone).
pub fn iperf3_in_lab(lab: &Lab, extra: &[&str]) -> (KillOnDrop, Receiver<String>) {
    let mut cmd = Lab::in_ns(&lab.server, SONDE);
    cmd.args(["serve", "--bind", SERVER_ADDR, "--port", "0"])
        .args(["--iperf3", &format!("{SERVER_ADDR}:5201")])
        .args(extra);
    iperf3_lines(cmd)
}

/// `cmd` (a `sonde serve --iperf3`) spawned and listening: killed when dropped, and its
/// stderr lines as they come.
pub fn iperf3_lines(cmd: Command) -> (KillOnDrop, Receiver<String>) {
    let mut child = spawn_for_stderr(cmd);
    let (tx, rx) = std::sync::mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let listening = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(10)).ok())
        .any(|line| line.contains("sonde iperf3 server listening"));
    if !listening {
        let _ = child.kill();
        let _ = child.wait();
        panic!("serve --iperf3 did not listen");
    }
    (KillOnDrop(child), rx)
}

/// `iperf3 -c SERVER -p 5201 -J ARGS` from the lab's client namespace; its JSON.
pub fn iperf3_json(lab: &Lab, args: &[&str]) -> serde_json::Value {
    let o = Lab::in_ns(&lab.client, "iperf3")
        .args(["-c", SERVER_ADDR, "-p", "5201", "-J"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "iperf3 -c {args:?}: {}",
        super::stdout(&o)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `iperf3 -s -1 -J` in the server namespace, listening once it returns.
pub fn iperf3_server_in_lab(lab: &Lab) -> Child {
    let mut child = Lab::in_ns(&lab.server, "iperf3")
        .args(["-s", "-1", "-J", "-B", SERVER_ADDR, "-p", "5201"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..100 {
        let up = Lab::in_ns(&lab.server, "ss")
            .args(["-Hltn", "sport = :5201"])
            .output()
            .unwrap();
        if !up.stdout.is_empty() {
            return child;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("iperf3 -s did not listen");
}

/// The JSON an `iperf3 -s -1 -J` printed once its test ended (within 10 s).
pub fn iperf3_server_json(mut server: Child) -> serde_json::Value {
    super::wait_with_timeout(&mut server, Duration::from_secs(10)).expect("iperf3 -s ends");
    serde_json::from_slice(&server.wait_with_output().unwrap().stdout).unwrap()
}

/// `sonde pps SERVER --iperf3 --json --no-save ARGS` from the lab's client namespace
/// against an `iperf3 -s -1 -J` started for it in the server's: our document and
/// iperf3's JSON, once its test ended.
pub fn pps_against_iperf3_server(
    lab: &Lab,
    args: &[&str],
) -> (serde_json::Value, serde_json::Value) {
    let server = iperf3_server_in_lab(lab);
    let t = Instant::now();
    let o = super::run({
        let mut c = Lab::in_ns(&lab.client, SONDE);
        c.args(["pps", SERVER_ADDR, "--iperf3", "--json", "--no-save"])
            .args(args);
        c
    });
    eprintln!("sonde pps --iperf3 {args:?} took {:?}", t.elapsed());
    let doc = super::doc_of(&o);
    (doc, iperf3_server_json(server))
}

/// The document `serve --iperf3` logged (in `rx`, its stderr) for the test it served next.
pub fn iperf3_served_doc(rx: &Receiver<String>) -> serde_json::Value {
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a served test's document");
        if let Some((_, json)) = line.split_once("iperf3 document ") {
            return serde_json::from_str(json).unwrap();
        }
        assert!(!line.contains("iperf3 client"), "{line}");
    }
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

/// `cmd` (a sonde in the controller's namespace) as `sonde fleet FILE --db DB` measuring
/// every 2 s at any load, serving `/metrics` on `metrics`, quiet, killed when dropped.
pub fn fleet_every_2s(
    mut cmd: Command,
    file: &std::path::Path,
    db: &std::path::Path,
    metrics: &str,
) -> KillOnDrop {
    cmd.args([
        "fleet",
        file.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
    ])
    .args(["--every", "2s", "--max-load", "100", "--metrics", metrics])
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    KillOnDrop(cmd.spawn().unwrap())
}

/// A JSON number as f64.
fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Packets in each interval of a pps document, on `side` (`sender` or `receiver`).
pub fn our_packets(doc: &serde_json::Value, side: &str) -> Vec<f64> {
    doc["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| f(&i[side]["packets_per_second"]) * (f(&i["end_s"]) - f(&i["start_s"])))
        .collect()
}

/// Each of `ours` (a figure an interval, `what`'s) within `within` (relative, one-sided)
/// of iperf3's in the interval of the same index, `theirs`; at least two of each.
pub fn intervals_within(ours: &[f64], theirs: &[f64], what: &str, within: f64) {
    assert!(
        ours.len() >= 2 && theirs.len() >= 2,
        "{what}: {ours:?} {theirs:?}"
    );
    for (i, (o, t)) in ours.iter().zip(theirs).enumerate() {
        eprintln!(
            "{what} interval {i}: ours {o:.0} iperf3 {t:.0} ({:+.2}%)",
            (o / t - 1.0) * 100.0
        );
        assert!(
            (o - t).abs() / t < within,
            "{what} interval {i}: ours {o} vs iperf3's {t}"
        );
    }
}

/// Packets in each of iperf3's whole intervals (its sums) in its `-J` output.
pub fn their_packets(json: &serde_json::Value) -> Vec<f64> {
    json["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["sum"])
        .filter(|s| f(&s["seconds"]) > 0.5)
        .map(|s| f(&s["packets"]))
        .collect()
}
