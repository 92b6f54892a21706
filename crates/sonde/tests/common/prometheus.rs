//! A real Prometheus in a test's namespace: started on a scratch directory with the
//! test's configuration, asked through its HTTP API from inside that namespace, killed
//! on drop.

use std::io::Write as _;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{temp_file, Lab};

pub struct Prometheus {
    child: Child,
    ns: String,
    listen: &'static str,
}

impl Prometheus {
    /// Prometheus in namespace `ns` listening on `listen`, its configuration `config`
    /// (prometheus.yml's text) in a scratch directory named after `name`.
    pub fn start(ns: &str, listen: &'static str, name: &str, config: &str) -> Prometheus {
        let dir = temp_file(name);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("prometheus.yml");
        std::fs::write(&file, config).unwrap();
        let mut cmd = Lab::in_ns(ns, "prometheus");
        cmd.arg(format!("--config.file={}", file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={listen}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Prometheus {
            child: cmd.spawn().expect("prometheus starts"),
            ns: ns.into(),
            listen,
        }
    }

    /// An instant query through Prometheus' HTTP API, from inside its namespace.
    pub fn query(&self, promql: &str) -> Vec<Value> {
        let script = "import json, sys, urllib.parse, urllib.request\n\
             q = urllib.parse.urlencode({'query': sys.argv[2]})\n\
             print(urllib.request.urlopen(sys.argv[1] + '/api/v1/query?' + q, timeout=5).read().decode())";
        let out = Lab::in_ns(&self.ns, "python3")
            .args(["-c", script, &format!("http://{}", self.listen), promql])
            .output()
            .unwrap();
        match serde_json::from_slice::<Value>(&out.stdout) {
            Ok(v) => v["data"]["result"].as_array().cloned().unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// The query's series once `done` holds for them, within `limit`.
    pub fn wait_for(
        &self,
        promql: &str,
        limit: Duration,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let began = Instant::now();
        loop {
            let r = self.query(promql);
            if done(&r) {
                return r;
            }
            assert!(began.elapsed() < limit, "{promql}: {r:#?} after {limit:?}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `promtool ARGS` with `input` on stdin.
pub fn promtool(args: &[&str], input: &str) -> std::process::Output {
    let mut child = std::process::Command::new("promtool")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}
