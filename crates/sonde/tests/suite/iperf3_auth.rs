//! `sonde stream --iperf3` against Debian's `iperf3 -s` that requires iperf3's
//! authentication (`--rsa-private-key-path`, `--authorized-users-path`; the key pair made
//! with openssl here):
//! - without credentials the run fails at once, naming the far end and the
//!   authentication it requires, with a non-zero exit. iperf3's server refuses with
//!   SERVER_ERROR and its error number but no errno, then closes: before the fix that
//!   read as "closed the control connection while reading SERVER_ERROR's codes";
//! - with them (`--iperf3-username`, `--iperf3-rsa-public-key`, the password in
//!   IPERF3_PASSWORD; PKCS#1 v1.5 padding, as iperf3 3.12 decrypts) the test runs; a wrong
//!   password, or OAEP padding that 3.12 cannot decrypt, is refused by name, at once;
//! - the OAEP token (iperf3 3.17's padding, the default) decrypts with openssl's OAEP to
//!   iperf3's text, as a server that captures it shows.

use crate::common;

use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::serve_proc::KillOnDrop;
use common::*;

/// `openssl ARGS`, which must succeed.
fn openssl(args: &[&str]) {
    let o = run({
        let mut c = Command::new("openssl");
        c.args(args);
        c
    });
    assert!(o.status.success(), "openssl {args:?}: {}", stderr(&o));
}

/// iperf3's line of an authorized user: `USER,sha256("{USER}PASSWORD")` in hex.
fn user_line(user: &str, password: &str) -> String {
    let mut c = Command::new("openssl")
        .args(["dgst", "-sha256", "-r"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(format!("{{{user}}}{password}").as_bytes())
        .unwrap();
    let o = c.wait_with_output().unwrap();
    let hash = stdout(&o).split_whitespace().next().unwrap().to_string();
    assert_eq!(hash.len(), 64, "{hash}");
    format!("{user},{hash}\n")
}

/// An RSA key pair (PEM: the private key iperf3's server reads, the public one its
/// clients encrypt to) and an authorized users file.
pub struct AuthFiles {
    pub private: PathBuf,
    pub public: PathBuf,
    pub users: PathBuf,
}

pub fn auth_files(user: &str, password: &str) -> AuthFiles {
    let f = AuthFiles {
        private: temp_file("iperf3-private.pem"),
        public: temp_file("iperf3-public.pem"),
        users: temp_file("iperf3-users.csv"),
    };
    let (private, public) = (f.private.to_str().unwrap(), f.public.to_str().unwrap());
    openssl(&["genrsa", "-out", private, "2048"]);
    openssl(&["rsa", "-in", private, "-pubout", "-out", public]);
    std::fs::write(&f.users, user_line(user, password)).unwrap();
    f
}

/// `iperf3 -s` on loopback `port` requiring authentication by `files`, listening.
pub fn authenticating_server(port: u16, files: &AuthFiles) -> KillOnDrop {
    let child = Command::new("iperf3")
        // -J: its results then carry its version, which the document names.
        .args(["-s", "-J", "-B", "127.0.0.1", "-p", &port.to_string()])
        .arg("--rsa-private-key-path")
        .arg(&files.private)
        .arg("--authorized-users-path")
        .arg(&files.users)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = KillOnDrop(child);
    for _ in 0..100 {
        let up = run({
            let mut c = Command::new("ss");
            c.args(["-Hltn", &format!("sport = :{port}")]);
            c
        });
        if !stdout(&up).is_empty() {
            return server;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("iperf3 -s with authentication did not listen");
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The timing lock, mario's key files and an iperf3 -s requiring them on a free port;
/// `None` without the tools.
fn mario_served() -> Option<(Serial, AuthFiles, u16, KillOnDrop)> {
    if !need_tools(&["iperf3", "openssl", "ss"]) {
        return None;
    }
    let serial = Serial::take();
    let files = auth_files("mario", "rossi");
    let port = free_port();
    let server = authenticating_server(port, &files);
    Some((serial, files, port, server))
}

#[test]
fn an_authenticating_iperf3_server_is_named_without_credentials() {
    let Some((_serial, _files, port, _server)) = mario_served() else {
        return;
    };
    let t = Instant::now();
    let o = run({
        let mut c = sonde_cmd();
        c.args(["stream", "127.0.0.1", "--iperf3", "-p", &port.to_string()])
            .args(["-t", "1", "--warmup", "0", "--no-save"]);
        c
    });
    let took = t.elapsed();
    let err = stderr(&o);
    eprintln!("without credentials, in {took:?}: {err}");
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("iperf3 server at 127.0.0.1:{port}"))
            && err.contains("requires iperf3 authentication")
            && err.contains("iperf3 error 142")
            && err.contains("--iperf3-username"),
        "{err}"
    );
    assert!(took < Duration::from_secs(3), "{took:?}");
}

/// `sonde stream 127.0.0.1 --iperf3 -p PORT -t 1` as `mario` with `password` (none: unset)
/// and `extra`: its output and how long it took.
fn as_mario(
    port: u16,
    files: &AuthFiles,
    password: Option<&str>,
    extra: &[&str],
) -> (std::process::Output, Duration) {
    let t = Instant::now();
    let o = run({
        let mut c = sonde_cmd();
        c.args(["stream", "127.0.0.1", "--iperf3", "-p", &port.to_string()])
            .args(["-t", "1", "--warmup", "0", "--no-save", "--json"])
            .args(["--iperf3-username", "mario", "--iperf3-rsa-public-key"])
            .arg(&files.public)
            .args(extra)
            .env_remove("IPERF3_PASSWORD");
        if let Some(p) = password {
            c.env("IPERF3_PASSWORD", p);
        }
        c
    });
    (o, t.elapsed())
}

#[test]
fn credentials_are_proved_to_an_authenticating_iperf3_server() {
    let Some((_serial, files, port, _server)) = mario_served() else {
        return;
    };
    let pkcs1 = ["--iperf3-use-pkcs1-padding"];

    let (o, took) = as_mario(port, &files, Some("rossi"), &pkcs1);
    let doc = doc_of(&o);
    eprintln!(
        "authenticated run in {took:?}: {:.1} Mbit/s received by {}",
        doc["end"]["receiver"]["bits_per_second"].as_f64().unwrap() / 1e6,
        doc["end"]["receiver"]["host"]
    );
    assert_eq!(doc["end"]["partial"], false);
    assert!(doc["end"]["receiver"]["bytes"].as_u64() > Some(0));
    assert!(
        doc["start"]["server_command"]
            .as_str()
            .unwrap()
            .starts_with("iperf3 server (iperf 3."),
        "{}",
        doc["start"]
    );
    // The password is not on the command line the document records.
    assert!(!doc["start"]["command"].as_str().unwrap().contains("rossi"));

    for (password, extra, says) in [
        (Some("wrong"), &pkcs1[..], "a wrong username or password"),
        (Some("rossi"), &[][..], "(OAEP here;"),
    ] {
        let (o, took) = as_mario(port, &files, password, extra);
        let err = stderr(&o);
        eprintln!("{password:?} {extra:?}: in {took:?}: {err}");
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("iperf3 server at 127.0.0.1:{port}"))
                && err.contains("refused mario's (iperf3 error 142)")
                && err.contains(says),
            "{err}"
        );
        assert!(took < Duration::from_secs(3), "{took:?}");
    }
    // Without the password: a usage error naming where it comes from, before any
    // connection.
    let (o, _) = as_mario(port, &files, None, &pkcs1);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("IPERF3_PASSWORD"), "{}", stderr(&o));
}

/// A server that takes the cookie and the parameters, keeps the `authtoken` and refuses
/// with IEAUTHTEST as iperf3's does.
fn capture_token() -> (u16, std::thread::JoinHandle<String>) {
    use std::io::Read;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut cookie = [0u8; 37];
        s.read_exact(&mut cookie).unwrap();
        s.write_all(&[9]).unwrap();
        let mut len = [0u8; 4];
        s.read_exact(&mut len).unwrap();
        let mut json = vec![0u8; u32::from_be_bytes(len).min(8192) as usize];
        s.read_exact(&mut json).unwrap();
        s.write_all(&[0xfe, 0, 0, 0, 142]).unwrap();
        let params: serde_json::Value = serde_json::from_slice(&json).unwrap();
        params["authtoken"].as_str().unwrap().to_string()
    });
    (port, t)
}

#[test]
fn the_oaep_token_decrypts_with_openssls_oaep_to_iperf3s_text() {
    if !need_tools(&["openssl"]) {
        return;
    }
    let files = auth_files("mario", "rossi");
    let (port, server) = capture_token();
    let (o, _) = as_mario(port, &files, Some("rossi"), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let token = server.join().unwrap();
    let (b64, sealed) = (temp_file("token.b64"), temp_file("token.bin"));
    std::fs::write(&b64, &token).unwrap();
    let (b64, sealed) = (b64.to_str().unwrap(), sealed.to_str().unwrap());
    openssl(&["base64", "-d", "-A", "-in", b64, "-out", sealed]);
    let o = run({
        let mut c = Command::new("openssl");
        c.args(["pkeyutl", "-decrypt", "-inkey"])
            .arg(&files.private)
            .args(["-pkeyopt", "rsa_padding_mode:oaep", "-in", sealed]);
        c
    });
    assert!(o.status.success(), "openssl: {}", stderr(&o));
    let text = stdout(&o);
    let ts: i64 = text
        .strip_prefix("user: mario\npwd:  rossi\nts:   ")
        .unwrap_or_else(|| panic!("{text:?}"))
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((now - ts).abs() <= 5, "token clock {ts}, now {now}");
}
