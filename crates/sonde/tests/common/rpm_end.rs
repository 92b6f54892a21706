//! The responsiveness tests' endpoints: `sonde serve --rpm` (its URL read from its own
//! stderr line, the rest of its stderr kept for the test to read) and nginx configured as
//! the draft's test endpoint.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{sonde_cmd, Lab, SONDE};

/// A running `sonde serve --rpm`; killed on drop.
pub struct Endpoint {
    pub child: Child,
    /// `https://ADDR:PORT` (or `http://` with h2c).
    pub base: String,
    /// The self-signed certificate's SHA-256, when one was made.
    pub fingerprint: Option<String>,
    /// Everything it wrote on stderr so far.
    pub log: Arc<Mutex<String>>,
}

impl Endpoint {
    /// `sonde serve --bind ADDR --port 0 --rpm ADDR:0 EXTRA...`, in namespace `ns` when given.
    pub fn start(ns: Option<&str>, addr: &str, extra: &[&str]) -> Endpoint {
        let mut cmd = match ns {
            Some(ns) => Lab::in_ns(ns, SONDE),
            None => sonde_cmd(),
        };
        let rpm = format!("{addr}:0");
        cmd.args(["serve", "--bind", addr, "--port", "0", "--rpm", &rpm])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = String::new();
        let line = loop {
            let Some(Ok(l)) = lines.next() else {
                panic!("serve --rpm ended before listening: {seen}")
            };
            seen += &l;
            seen.push('\n');
            if l.contains("rpm endpoint listening on") {
                break l;
            }
        };
        let url = line.split("listening on ").nth(1).unwrap();
        let base = url.split("/.well-known").next().unwrap().to_string();
        let fingerprint = line
            .split("sha256 ")
            .nth(1)
            .map(|f| f.split(';').next().unwrap().to_string());
        let log = Arc::new(Mutex::new(seen));
        let keep = Arc::clone(&log);
        // Drained for ever: a full pipe would stop the server at its next log line.
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                let mut k = keep.lock().unwrap();
                k.push_str(&l);
                k.push('\n');
            }
        });
        Endpoint {
            child,
            base,
            fingerprint,
            log,
        }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Whether its log says `text` within `limit`: the line is read by another thread,
    /// which on a busy machine runs after the test saw what caused it.
    pub fn log_says(&self, text: &str, limit: std::time::Duration) -> bool {
        let until = std::time::Instant::now() + limit;
        while !self.log().contains(text) {
            if std::time::Instant::now() > until {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        true
    }

    /// The port it serves on.
    pub fn port(&self) -> u16 {
        self.base.rsplit(':').next().unwrap().parse().unwrap()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx from Debian as the draft's test endpoint: HTTP/2 over TLS 1.3, the configuration
/// at /.well-known/nq, an 8 GiB large object (a sparse file), a 1-byte small one, and an
/// upload sink (the body read whole, then answered: nginx buffers a request body before it
/// proxies it, so the proxied server is never reached while an upload lasts). Also a
/// redirecting and a compressing configuration URL and one that is not the draft's.
pub struct Nginx {
    pub child: Child,
    pub dir: PathBuf,
    pub base: String,
}

impl Nginx {
    pub fn start(ns: &str, addr: &str, port: u16) -> Nginx {
        let dir =
            std::env::temp_dir().join(format!("sonde-rpm-nginx-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for d in [
            "root/.well-known",
            "root/bad/.well-known",
            "root/gz/.well-known",
            "tmp",
            "logs",
        ] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        let base = format!("https://{addr}:{port}");
        let root = dir.join("root");
        std::fs::write(
            root.join(".well-known/nq"),
            sonde_rpm::config::render(&base),
        )
        .unwrap();
        std::fs::write(
            root.join("bad/.well-known/nq"),
            r#"{"version":2,"urls":{}}"#,
        )
        .unwrap();
        // A gzip file served as the configuration whatever the client accepts.
        let gz = Command::new("gzip")
            .args(["-c", root.join(".well-known/nq").to_str().unwrap()])
            .output()
            .unwrap();
        std::fs::write(root.join("gz/.well-known/nq.gz"), gz.stdout).unwrap();
        std::fs::write(root.join("small"), "x").unwrap();
        let large = std::fs::File::create(root.join("large")).unwrap();
        large.set_len(8 << 30).unwrap();
        // A certificate of its own, made by openssl (not by the code under test).
        let ok = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=nginx-test",
            ])
            .arg("-keyout")
            .arg(dir.join("key.pem"))
            .arg("-out")
            .arg(dir.join("cert.pem"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(ok.success(), "openssl req");
        let d = dir.display();
        let conf = format!(
            r#"daemon off;
master_process off;
worker_processes 1;
error_log {d}/logs/error.log warn;
pid {d}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {d}/tmp;
    proxy_temp_path {d}/tmp;
    fastcgi_temp_path {d}/tmp;
    uwsgi_temp_path {d}/tmp;
    scgi_temp_path {d}/tmp;
    default_type application/octet-stream;
    sendfile on;
    tcp_nodelay on;
    server {{
        listen {addr}:{port} ssl http2;
        ssl_certificate {d}/cert.pem;
        ssl_certificate_key {d}/key.pem;
        ssl_protocols TLSv1.3;
        root {d}/root;
        location = /.well-known/nq {{ default_type application/json; }}
        location = /small {{ }}
        location = /large {{ }}
        location = /upload {{
            client_max_body_size 0;
            client_body_buffer_size 1m;
            proxy_pass http://127.0.0.1:9/;
        }}
        location = /redirect/.well-known/nq {{ return 301 /.well-known/nq; }}
        location = /bad/.well-known/nq {{ default_type application/json; }}
        location = /gz/.well-known/nq {{ gzip_static always; default_type application/json; }}
    }}
}}
"#
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let child = Lab::in_ns(ns, "nginx")
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let n = Nginx { child, dir, base };
        n.wait_listening(ns, port);
        n
    }

    fn wait_listening(&self, ns: &str, port: u16) {
        let until = Instant::now() + Duration::from_secs(5);
        let want = format!(":{port}");
        while Instant::now() < until {
            let out = Lab::in_ns(ns, "ss").args(["-ltn"]).output().unwrap();
            if String::from_utf8_lossy(&out.stdout).contains(&want) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let log = std::fs::read_to_string(self.dir.join("logs/error.log")).unwrap_or_default();
        panic!("nginx did not listen on {port}: {log}");
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Short stages: 150 ms intervals, 2.1 s at most each way. MNP 4: with 16 flows in a
/// 40-packet queue most drops would be recovered by a retransmission timeout (a flow's
/// window too small for three duplicate ACKs), and a self probe queued behind a lost
/// segment of its own connection measures that.
pub const SHORT: [&str; 6] = [
    "--interval",
    "150ms",
    "--stage-limit",
    "2.1",
    "--max-connections",
    "4",
];

/// `sonde rpm URL --insecure --download-only` in the client namespace, short stages.
pub fn short_rpm(lab: &Lab, url: &str) -> serde_json::Value {
    let out = Lab::in_ns(&lab.client, SONDE)
        .args([
            "rpm",
            url,
            "--insecure",
            "--download-only",
            "--json",
            "--no-save",
        ])
        .args(SHORT)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sonde rpm {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Makes the TCP connections namespace `ns` opens or accepts through its default route use
/// congestion control `cc` (`ip route ... congctl`; `None`: the namespace's default again).
/// For senders with no setting of their own (nginx, `sonde rpm`'s upload): a namespace
/// takes this machine's default (BBR here) and may not make cubic its own (the kernel
/// allows a namespace only the host's tcp_allowed_congestion_control), but a route's
/// algorithm is any the kernel has.
pub fn route_congestion(ns: &str, cc: Option<&str>) {
    let shown = Lab::in_ns_ok(ns, "ip", &["route", "show", "default"]);
    let mut route: Vec<&str> = shown.split_whitespace().collect();
    if let Some(at) = route.iter().position(|w| *w == "congctl") {
        route.truncate(at);
    }
    assert!(
        route.first() == Some(&"default"),
        "{ns}: no default route: {shown}"
    );
    let mut args = vec!["route", "replace"];
    args.extend(&route);
    if let Some(cc) = cc {
        args.extend(["congctl", cc]);
    }
    Lab::in_ns_ok(ns, "ip", &args);
}
