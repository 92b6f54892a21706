//! A continuous fleet serving its `/metrics` on a loopback port (`sonde fleet --every 1h
//! --metrics 127.0.0.1:0`), for the endpoint's attacks: its agents are loopback addresses
//! where nothing listens, so its runs fail at once and it then only serves. And the
//! self-signed certificate its TLS tests serve.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use super::{run, sonde_cmd, stderr, temp_file};

/// The fleet; killed on drop.
pub struct Monitor {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Monitor {
    /// The fleet with `extra` flags, its files named after `name`.
    pub fn start(name: &str, extra: &[&str]) -> Monitor {
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let file = temp_file(&format!("{name}.toml"));
        let mut text = format!("name = \"m\"\nport = {closed}\n");
        for k in 2..=3 {
            text += &format!("[[agent]]\nname = \"a{k}\"\naddress = \"127.0.0.{k}\"\n");
        }
        text += "[[test]]\ntype = \"ping\"\nduration = 1\n";
        std::fs::write(&file, text).unwrap();
        let db = temp_file(&format!("{name}.db"));
        let mut cmd = sonde_cmd();
        cmd.args([
            "fleet",
            file.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
        ])
        .args(["--every", "1h", "--metrics", "127.0.0.1:0"])
        .args(extra);
        // It prints where it serves.
        let (child, addr) = super::serve_proc::until_listening(cmd, "sonde fleet --metrics", |l| {
            l.strip_prefix("metrics: http://")
                .or_else(|| l.strip_prefix("metrics: https://"))?
                .strip_suffix("/metrics")?
                .parse()
                .ok()
        });
        Monitor { child, addr }
    }

    /// The thread CPU the monitor has used (user and system), from /proc.
    pub fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        Duration::from_millis(ticks * 1000 / hz)
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A self-signed certificate for 127.0.0.1 and its key (0600), made by openssl, its
/// files named after `name`.
pub fn certificate(name: &str) -> (PathBuf, PathBuf) {
    let cert = temp_file(&format!("{name}-cert.pem"));
    let key = temp_file(&format!("{name}-key.pem"));
    let mut c = std::process::Command::new("openssl");
    c.args(["req", "-x509", "-newkey", "ec"])
        .args([
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        // A leaf, not a CA: rustls refuses a CA's certificate as the server's.
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert);
    let o = run(c);
    assert!(o.status.success(), "{}", stderr(&o));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    (cert, key)
}
