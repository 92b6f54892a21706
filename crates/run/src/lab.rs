//! `sonde lab`'s two hosts on one machine: as root, two network namespaces joined by a
//! veth pair (`netns::Pair`), an agent (`sonde serve`, another host, so a process of its
//! own) in one and the lab's tests run in the other by a thread that entered it; without
//! root (or namespaces) both over loopback. Everything is deleted when dropped, also on
//! error or Ctrl-C.

use sonde_results::spec::Engine;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sonde_results::Document;

use crate::netns::{NetnsError, Pair, CLIENT_ADDR, SERVER_ADDR};
use crate::signals::Interrupt;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LabError(pub String);

/// A running agent; dropping it stops it (SIGTERM, then SIGKILL).
pub struct AgentProcess {
    child: Child,
    pub port: u16,
}

impl AgentProcess {
    /// Starts `cmd` (a `sonde serve`) and waits for its "listening on ADDR:PORT" line.
    pub fn start(mut cmd: Command) -> Result<AgentProcess, LabError> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .env("SONDE_LOG", "warn");
        let mut child = cmd
            .spawn()
            .map_err(|e| LabError(format!("cannot start the agent: {e}")))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut agent = AgentProcess { child, port: 0 };
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| LabError("the agent did not start listening within 10 s".into()))?;
        agent.port = line
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
            .ok_or_else(|| LabError(format!("unexpected agent output: {line}")))?;
        Ok(agent)
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        // SAFETY: signals our own child by pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lab's own key, in a directory only its owner can read; removed on drop. The agent
/// and every measurement take it, so the lab runs as a keyed fleet would.
pub struct LabKey {
    dir: PathBuf,
    pub file: PathBuf,
}

impl LabKey {
    pub fn create(tag: &str) -> Result<LabKey, LabError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = std::env::temp_dir().join(format!("sonde-{tag}-key"));
        let cannot =
            |p: &Path, e: std::io::Error| LabError(format!("cannot create {}: {e}", p.display()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| cannot(&dir, e))?;
        let key = LabKey {
            file: dir.join("key"),
            dir,
        };
        let mut bytes = [0u8; 32];
        crate::random::fill(&mut bytes);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key.file)
            .and_then(|mut f| std::io::Write::write_all(&mut f, hex.as_bytes()))
            .map_err(|e| cannot(&key.file, e))?;
        Ok(key)
    }
}

impl Drop for LabKey {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The lab's hosts: namespaces (or loopback), its key and its agent. Dropping it stops
/// the agent, then deletes the namespaces and the key.
pub struct Lab {
    agent: AgentProcess,
    pub netns: Option<Pair>,
    pub key: LabKey,
    /// The agent's address.
    pub host: String,
}

impl Lab {
    /// Starts the agent (`exe serve`) in the server namespace of `netns`, or on loopback
    /// without one. Over veth the agent allows XDP, for the lab's one bypass measurement.
    pub fn start(exe: &Path, tag: &str, netns: Option<Pair>) -> Result<Lab, LabError> {
        let key = LabKey::create(tag)?;
        let (mut cmd, host) = match &netns {
            Some(n) => {
                let mut cmd = n.server.exec(exe);
                cmd.args([
                    "serve",
                    "--bind",
                    SERVER_ADDR,
                    "--port",
                    "0",
                    "--allow",
                    &Engine::Xdp.to_string(),
                ]);
                (cmd, SERVER_ADDR)
            }
            None => {
                let mut cmd = Command::new(exe);
                cmd.args(["serve", "--bind", "127.0.0.1", "--port", "0"]);
                (cmd, "127.0.0.1")
            }
        };
        cmd.env("SONDE_KEY_FILE", &key.file);
        Ok(Lab {
            agent: AgentProcess::start(cmd)?,
            netns,
            key,
            host: host.into(),
        })
    }

    pub fn port(&self) -> u16 {
        self.agent.port
    }

    /// Runs `f` where the lab's client is: in the client namespace, or here.
    pub fn in_client<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, NetnsError> {
        match &self.netns {
            Some(n) => n.client.run_inside(f),
            None => Ok(f()),
        }
    }
}

fn is_root() -> bool {
    // SAFETY: no arguments.
    unsafe { libc::geteuid() == 0 }
}

/// The tests `sonde lab` runs, each the first word of one or more measurements
/// (`--only` picks among them).
pub const LAB_TESTS: [&str; 5] = ["stream", "ping", "rpc", "pps", "load"];

/// The standard measurements: what `sonde TEST HOST` each runs, as words after the host,
/// those of the tests in `only` alone when it names any, each with `warmup_ms` of warm-up
/// when given (else its test's own). Over veth the packet rate is measured with AF_XDP too
/// (loopback has no XDP). The pings measure the tool's own floor first, to tell the path's
/// tail from the tool's.
pub fn measurements(
    duration_ms: u64,
    warmup_ms: Option<u64>,
    veth: bool,
    only: &[String],
) -> Vec<Vec<String>> {
    let t = format!("{duration_ms}ms");
    let warmup = warmup_ms.map(|w| ["--warmup".to_string(), format!("{w}ms")]);
    let xdp = Engine::Xdp.to_string();
    // Each with whether it needs XDP on the path.
    let lines: [(&[&str], bool); 8] = [
        (&["stream", "-P", "1"], false),
        (&["stream", "-P", "8"], false),
        (&["ping", "--self-noise"], false),
        (&["ping", "--udp", "--self-noise"], false),
        (&["rpc", "-C", "8", "-W", "8"], false),
        (&["pps", "--flows", "4", "--rx-threads", "2"], false),
        (&["pps", "--engine", &xdp, "--flows", "4"], true),
        (&["load", "-P", "4"], false),
    ];
    lines
        .iter()
        .filter(|(_, bypass)| veth || !bypass)
        .filter(|(l, _)| only.is_empty() || only.iter().any(|o| o == l[0]))
        .map(|(l, _)| {
            let mut v: Vec<String> = l.iter().map(|w| w.to_string()).collect();
            v.extend(["-t".to_string(), t.clone()]);
            v.extend(warmup.iter().flatten().cloned());
            v
        })
        .collect()
}

/// A measurement's command line against the lab's agent: the words shown and recorded
/// (`sonde TEST HOST --port P ...`), then those that only route its output and key
/// (`--key-file`, `--output FILE`).
pub fn command_line(
    host: &str,
    port: u16,
    key_file: &Path,
    words: &[String],
    file: &Path,
) -> (Vec<String>, Vec<String>) {
    let (test, rest) = words.split_at(1);
    let port = port.to_string();
    let head = ["sonde", &test[0], host, "--port", &port].map(String::from);
    let shown = head.into_iter().chain(rest.iter().cloned()).collect();
    let key = key_file.display().to_string();
    let tail = ["--key-file", &key, "--output", &file.display().to_string()].map(String::from);
    (shown, tail.to_vec())
}

/// Where the lab's documents go: `asked`, or a directory of its own in the temporary one.
pub fn out_dir(asked: Option<&Path>, tag: &str) -> Result<PathBuf, LabError> {
    let dir = match asked {
        Some(d) => d.to_path_buf(),
        None => std::env::temp_dir().join(format!("sonde-{tag}")),
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| LabError(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}

/// The lab's namespaces, or `None` (loopback) saying why.
pub fn namespaces(asked: bool, tag: &str, say: &dyn Fn(&str)) -> Option<Pair> {
    let loopback = "running over loopback (127.0.0.1) instead";
    if asked {
        say("lab: over loopback (127.0.0.1), as asked");
        return None;
    }
    if !is_root() {
        say(&format!(
            "lab: not root, so no network namespaces: {loopback}"
        ));
        return None;
    }
    match Pair::create("sonde", tag, "sv") {
        Ok(n) => {
            let (c, s) = (n.client.name(), n.server.name());
            let veth = format!("{}/{}", n.client_if, n.server_if);
            say(&format!(
                "lab: namespaces {c} ({CLIENT_ADDR}) and {s} ({SERVER_ADDR}) joined by veth {veth}"
            ));
            Some(n)
        }
        Err(e) => {
            say(&format!("lab: cannot build namespaces ({e}): {loopback}"));
            None
        }
    }
}

/// How the lab's measurements went: each one's name and document, and whether one failed.
pub struct Results {
    pub docs: Vec<(String, Document)>,
    pub failed: bool,
}

/// One measurement: `sonde WORDS` against the lab's agent, run where the client is, its
/// document written to the file given; or why it could not run (the caller's error, shown
/// beside the measurement's name).
pub type Measure<'a> = dyn Fn(&Lab, &[String], &Path) -> Result<(), MeasureFailed> + Sync + 'a;

/// Why one measurement of the lab produced no document: the caller's own error.
pub type MeasureFailed = Box<dyn std::error::Error + Send + Sync>;

/// Runs `measurements` (of [`measurements`]), one after another until Ctrl-C, each
/// document kept in `out_dir` and read back; `say` gets the headings, `warn` what
/// produced nothing.
pub fn run_all(
    lab: &Lab,
    measurements: Vec<Vec<String>>,
    out_dir: &Path,
    measure: &Measure<'_>,
    say: &dyn Fn(&str),
    warn: &dyn Fn(&str),
    interrupt: &Interrupt,
) -> Result<Results, NetnsError> {
    let mut results = Results {
        docs: Vec::new(),
        failed: false,
    };
    for (i, words) in measurements.into_iter().enumerate() {
        let name = words[..words.len() - 2].join(" ");
        if interrupt.is_set() {
            break;
        }
        say(&format!("\n== {name} =="));
        let file = out_dir.join(format!("{i:02}-{}.json", name.replace([' ', '-'], "")));
        let ran = lab.in_client(|| measure(lab, &words, &file))?;
        let doc = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<Document>(&b).ok());
        match doc {
            Some(doc) => {
                results.failed |= doc.end.partial;
                results.docs.push((name, doc));
            }
            None => {
                let why = ran.err().map_or("no document".into(), |e| e.to_string());
                warn(&format!("lab: {name} produced no result: {why}"));
                results.failed = true;
            }
        }
    }
    Ok(results)
}

/// `sonde lab`'s flags.
pub struct LabParams<'a> {
    pub duration_ms: u64,
    pub warmup_ms: Option<u64>,
    /// `--output-dir`: the documents kept there; else in a temporary directory, removed.
    pub output_dir: Option<&'a Path>,
    pub loopback: bool,
    pub only: &'a [String],
}

/// Why the lab did not run.
#[derive(Debug, thiserror::Error)]
pub enum LabRunError {
    #[error(transparent)]
    Lab(#[from] LabError),
    #[error(transparent)]
    Netns(#[from] NetnsError),
}

/// `sonde lab`: the lab built with `exe` as its agent, its measurements run by `measure`,
/// then its table; `out` gets the text for stdout as is, `warn` what produced nothing.
/// Whether a measurement failed or Ctrl-C cut the lab (then the exit is partial).
pub fn run(
    params: &LabParams<'_>,
    exe: &Path,
    measure: &Measure<'_>,
    out: &dyn Fn(&str),
    warn: &dyn Fn(&str),
    interrupt: &Interrupt,
) -> Result<bool, LabRunError> {
    let say = |line: &str| out(&format!("{line}\n"));
    let tag = format!("lab{}", std::process::id());
    let out_dir = out_dir(params.output_dir, &tag)?;
    let netns = namespaces(params.loopback, &tag, &say);
    let lab = Lab::start(exe, &tag, netns)?;
    let veth = lab.netns.is_some();
    let (duration, warmup) = (params.duration_ms, params.warmup_ms);
    let measurements = measurements(duration, warmup, veth, params.only);
    let results = run_all(&lab, measurements, &out_dir, measure, &say, warn, interrupt)?;
    drop(lab);
    let over = match veth {
        true => "two namespaces over veth",
        false => "loopback",
    };
    say(&format!("\n== lab summary ({over}) =="));
    out(&sonde_report::summary::lab(&results.docs));
    if params.output_dir.is_some() {
        say(&format!("result documents in {}", out_dir.display()));
    } else {
        let _ = std::fs::remove_dir_all(&out_dir);
    }
    if interrupt.is_set() {
        say("lab: interrupted; namespaces removed");
    }
    Ok(results.failed || interrupt.is_set())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measurement_shows_its_test_and_routes_its_output() {
        let words = measurements(2000, None, false, &[]);
        assert!(words.iter().all(|w| !w.contains(&"xdp".to_string())));
        let (shown, tail) = command_line(
            "127.0.0.1",
            5201,
            Path::new("/k/key"),
            &words[0],
            Path::new("/o/00.json"),
        );
        let shown = shown.join(" ");
        assert_eq!(shown, "sonde stream 127.0.0.1 --port 5201 -P 1 -t 2000ms");
        assert_eq!(tail, ["--key-file", "/k/key", "--output", "/o/00.json"]);
    }

    #[test]
    fn only_keeps_the_named_tests_measurements_in_order() {
        let only = ["pps".to_string(), "ping".to_string()];
        let firsts: Vec<String> = measurements(500, None, true, &only)
            .into_iter()
            .map(|w| w[..w.len() - 2].join(" "))
            .collect();
        let want = [
            "ping --self-noise",
            "ping --udp --self-noise",
            "pps --flows 4 --rx-threads 2",
            "pps --engine xdp --flows 4",
        ];
        assert_eq!(firsts, want);
        assert_eq!(measurements(500, None, true, &[]).len(), 8);
    }

    #[test]
    fn a_warmup_given_is_every_measurements_and_none_given_leaves_each_tests_own() {
        for words in measurements(200, Some(0), true, &[]) {
            assert_eq!(words[words.len() - 4..], ["-t", "200ms", "--warmup", "0ms"]);
        }
        let words = measurements(200, None, true, &[]);
        assert!(words.iter().all(|w| !w.contains(&"--warmup".to_string())));
    }
}
