//! `sonde lab`: a two-host lab on one machine. As root: two network namespaces joined by a
//! veth pair (198.18.0.1 and 198.18.0.2, RFC 2544's benchmark range), an agent in one, the
//! standard measurements from the other, everything deleted afterwards, also on error or
//! Ctrl-C. Without root (or without namespaces) it runs over loopback and says so.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sonde_results::Document;

use crate::cli::LabArgs;
use sonde_run::signals::Interrupt;

pub const CLIENT_ADDR: &str = "198.18.0.1";
pub const SERVER_ADDR: &str = "198.18.0.2";

/// Namespaces and the veth pair between them; dropping it deletes them.
pub struct Netns {
    pub client: String,
    pub server: String,
    pub client_if: String,
    pub server_if: String,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("cannot run `ip` (install iproute2)")?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Netns {
    /// Creates `sonde-<tag>-c` and `sonde-<tag>-s` joined by a veth pair, addressed and up.
    pub fn create(tag: &str) -> anyhow::Result<Netns> {
        let ns = Netns {
            client: format!("sonde-{tag}-c"),
            server: format!("sonde-{tag}-s"),
            client_if: format!("sv{tag}c"),
            server_if: format!("sv{tag}s"),
        };
        if ns.client_if.len() > 15 {
            bail!("namespace tag '{tag}' too long for an interface name");
        }
        ip(&["netns", "add", &ns.client])?;
        // From here on, Drop removes whatever was made.
        ip(&["netns", "add", &ns.server])?;
        ip(&[
            "link",
            "add",
            &ns.client_if,
            "netns",
            &ns.client,
            "type",
            "veth",
            "peer",
            "name",
            &ns.server_if,
            "netns",
            &ns.server,
        ])?;
        for (n, i, a) in [
            (&ns.client, &ns.client_if, CLIENT_ADDR),
            (&ns.server, &ns.server_if, SERVER_ADDR),
        ] {
            ip(&["-n", n, "addr", "add", &format!("{a}/24"), "dev", i])?;
            ip(&["-n", n, "link", "set", i, "up"])?;
            ip(&["-n", n, "link", "set", "lo", "up"])?;
        }
        Ok(ns)
    }

    /// A command run inside namespace `ns`.
    pub fn exec(ns: &str, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(program);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in [&self.client, &self.server] {
            let _ = Command::new("ip")
                .args(["netns", "del", n])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A running agent; dropping it stops it (SIGTERM, then SIGKILL).
pub struct AgentProcess {
    child: Child,
    pub port: u16,
}

impl AgentProcess {
    /// Starts `cmd` (a `sonde serve`) and waits for its "listening on ADDR:PORT" line.
    pub fn start(mut cmd: Command) -> anyhow::Result<AgentProcess> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .env("SONDE_LOG", "warn");
        let mut child = cmd.spawn().context("cannot start the agent")?;
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
            .context("the agent did not start listening within 10 s")?;
        agent.port = line
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
            .with_context(|| format!("unexpected agent output: {line}"))?;
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
/// and every measurement take it through SONDE_KEY_FILE, so the lab runs as a keyed
/// fleet would.
pub struct LabKey {
    dir: std::path::PathBuf,
    pub file: std::path::PathBuf,
}

impl LabKey {
    pub fn create(tag: &str) -> anyhow::Result<LabKey> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = std::env::temp_dir().join(format!("sonde-{tag}-key"));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let key = LabKey {
            file: dir.join("key"),
            dir,
        };
        let mut bytes = [0u8; 32];
        sonde_run::random::fill(&mut bytes);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key.file)
            .with_context(|| format!("cannot create {}", key.file.display()))?;
        std::io::Write::write_all(&mut f, hex::encode(bytes).as_bytes())?;
        Ok(key)
    }
}

impl Drop for LabKey {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn is_root() -> bool {
    // SAFETY: no arguments.
    unsafe { libc::geteuid() == 0 }
}

/// The standard measurements: what `sonde TEST HOST` each runs, as words after the host.
/// Over veth the packet rate is measured with AF_XDP too (loopback has no XDP).
fn measurements(duration_ms: u64, veth: bool) -> Vec<Vec<String>> {
    let t = format!("{duration_ms}ms");
    let lines: [&[&str]; 8] = [
        &["stream", "-P", "1"],
        &["stream", "-P", "8"],
        &["ping"],
        &["ping", "--udp"],
        &["rpc", "-C", "8", "-W", "8"],
        &["pps", "--flows", "4", "--rx-threads", "2"],
        &["pps", "--engine", "xdp", "--flows", "4"],
        &["load", "-P", "4"],
    ];
    lines
        .iter()
        .filter(|l| veth || !l.contains(&"xdp"))
        .map(|l| {
            let mut v: Vec<String> = l.iter().map(|w| w.to_string()).collect();
            v.extend(["-t".to_string(), t.clone()]);
            v
        })
        .collect()
}

pub fn run(args: &LabArgs, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot find the sonde executable")?;
    let tag = format!("lab{}", std::process::id());
    let out_dir = match &args.output_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("sonde-{tag}")),
    };
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;

    let netns = if args.loopback {
        outln!("lab: over loopback (127.0.0.1), as asked");
        None
    } else if !is_root() {
        outln!(
            "lab: not root, so no network namespaces: running over loopback (127.0.0.1) instead"
        );
        None
    } else {
        match Netns::create(&tag) {
            Ok(n) => {
                outln!("lab: namespaces {} ({CLIENT_ADDR}) and {} ({SERVER_ADDR}) joined by veth {}/{}", n.client, n.server, n.client_if, n.server_if);
                Some(n)
            }
            Err(e) => {
                outln!("lab: cannot build namespaces ({e:#}): running over loopback (127.0.0.1) instead");
                None
            }
        }
    };
    let key = LabKey::create(&tag)?;
    let (agent, host) = match &netns {
        Some(n) => {
            let mut cmd = Netns::exec(&n.server, &exe);
            // Its one bypass measurement runs over XDP (on the veth); nothing else.
            cmd.args(["serve", "--bind", SERVER_ADDR, "--port", "0"])
                .args(["--allow", "xdp"])
                .env("SONDE_KEY_FILE", &key.file);
            (AgentProcess::start(cmd)?, SERVER_ADDR.to_string())
        }
        None => {
            let mut cmd = Command::new(&exe);
            cmd.args(["serve", "--bind", "127.0.0.1", "--port", "0"])
                .env("SONDE_KEY_FILE", &key.file);
            (AgentProcess::start(cmd)?, "127.0.0.1".to_string())
        }
    };

    let mut results: Vec<(String, Document)> = Vec::new();
    let mut failed = false;
    for (i, words) in measurements(args.duration, netns.is_some())
        .into_iter()
        .enumerate()
    {
        let name = words[..words.len() - 2].join(" ");
        if interrupt.is_set() {
            break;
        }
        outln!("\n== {name} ==");
        let file = out_dir.join(format!("{i:02}-{}.json", name.replace([' ', '-'], "")));
        let mut cmd = match &netns {
            Some(n) => Netns::exec(&n.client, &exe),
            None => Command::new(&exe),
        };
        cmd.arg(&words[0])
            .args([&host, "--port", &agent.port.to_string()])
            .args(&words[1..])
            .arg("--output")
            .arg(&file)
            .env("SONDE_KEY_FILE", &key.file);
        let status = cmd
            .stdin(Stdio::null())
            .status()
            .context("cannot run the measurement")?;
        match std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<Document>(&b).ok())
        {
            Some(doc) => {
                failed |= doc.end.partial;
                results.push((name, doc));
            }
            None => {
                errln!("lab: {name} produced no result ({status})");
                failed = true;
            }
        }
    }
    drop(agent);
    drop(netns);
    outln!(
        "\n== lab summary ({}) ==",
        if host == SERVER_ADDR {
            "two namespaces over veth"
        } else {
            "loopback"
        }
    );
    out!("{}", sonde_report::summary::lab(&results));
    if args.output_dir.is_some() {
        outln!("result documents in {}", out_dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&out_dir);
    }
    if interrupt.is_set() {
        outln!("lab: interrupted; namespaces removed");
    }
    Ok(if failed || interrupt.is_set() {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}
