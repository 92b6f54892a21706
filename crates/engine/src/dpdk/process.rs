//! A running dpdk-testpmd in interactive mode, asked for its counters whenever the side
//! needs them, so that its figures fall on sonde's own interval edges (the reports read
//! `--stats 2` streams whose ticks are not aligned between the two hosts).
//!
//! Its output goes to a pseudo-terminal: testpmd writes its answers with stdio, which a
//! pipe would buffer past the prompt that ends them. It is killed when dropped, and by the
//! kernel if sonde dies (PR_SET_DEATHSIG); its runtime directory is removed either way.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::command::Plan;
use super::stats::{self, FwdStats, Xstats};

/// What testpmd prints when it waits for a command.
const PROMPT: &str = "testpmd> ";
/// How long an answer to one command may take.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// How long testpmd may take to exit after `quit`.
const QUIT_WITHIN: Duration = Duration::from_secs(5);
/// Lines of output quoted in an error.
const TAIL_LINES: usize = 12;
/// Where EAL keeps a process's runtime files (as root), one directory per file prefix.
const RUNTIME_DIRS: &str = "/var/run/dpdk";
/// The start of every file prefix sonde gives testpmd.
const PREFIX_HEAD: &str = "sonde-";

/// A file prefix no other testpmd of this host uses: this process's id, `role`, a count.
pub fn file_prefix(role: &str) -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{PREFIX_HEAD}{}-{role}-{n}", std::process::id())
}

/// Removes the runtime directories of sonde processes that died without removing their
/// own (killed outright: no code of theirs ran). The next testpmd sonde starts sweeps them.
fn sweep_stale(runtime: &Path) {
    let Ok(dirs) = std::fs::read_dir(runtime) else {
        return;
    };
    for d in dirs.flatten() {
        let name = d.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix(PREFIX_HEAD)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !Path::new("/proc").join(pid.to_string()).exists() {
                let _ = std::fs::remove_dir_all(d.path());
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DpdkError {
    #[error("starting {program}: {source}")]
    Spawn { program: String, source: io::Error },
    #[error("testpmd exited ({status}) {doing}; its last output:\n{tail}")]
    Exited {
        status: String,
        doing: String,
        tail: String,
    },
    #[error("testpmd did not answer within {} s {doing}; its last output:\n{tail}", within.as_secs())]
    Timeout {
        doing: String,
        within: Duration,
        tail: String,
    },
    #[error("talking to testpmd: {0}")]
    Io(#[from] io::Error),
}

/// testpmd's output so far, filled by a reader thread.
#[derive(Default)]
struct Output {
    text: Mutex<(String, bool)>,
    grew: Condvar,
}

pub struct Testpmd {
    child: Child,
    stdin: ChildStdin,
    output: Arc<Output>,
    /// Where the unread part of the output starts.
    read_to: usize,
    runtime_dir: PathBuf,
    /// The exact command line.
    pub command_line: String,
    /// `DPDK 22.11.11`, from the EAL's banner.
    pub version: Option<String>,
}

impl Testpmd {
    /// Starts testpmd as `plan` says and waits for its first prompt: the port is up.
    pub fn start(plan: &Plan, ready_within: Duration) -> Result<Testpmd, DpdkError> {
        let program = plan.program.display().to_string();
        let spawn_err = |source| DpdkError::Spawn {
            program: program.clone(),
            source,
        };
        sweep_stale(Path::new(RUNTIME_DIRS));
        let (master, slave) = pty().map_err(spawn_err)?;
        let mut cmd = Command::new(&plan.program);
        cmd.args(plan.args())
            .stdin(Stdio::piped())
            .stdout(Stdio::from(slave.try_clone().map_err(spawn_err)?))
            .stderr(Stdio::from(slave));
        // SAFETY: prctl and getppid are async-signal-safe; nothing else runs in the child.
        unsafe {
            let parent = libc::getpid();
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    return Err(io::Error::other("sonde exited while starting testpmd"));
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(spawn_err)?;
        // `cmd` holds the slave's descriptors until dropped; the reader sees EOF only once
        // the child's are the last ones.
        drop(cmd);
        let stdin = child.stdin.take().expect("stdin is piped");
        let output = Arc::new(Output::default());
        let sink = output.clone();
        std::thread::Builder::new()
            .name("testpmd-output".into())
            .spawn(move || read_all(File::from(master), &sink))
            .map_err(spawn_err)?;
        let mut t = Testpmd {
            child,
            stdin,
            output,
            read_to: 0,
            runtime_dir: Path::new(RUNTIME_DIRS).join(&plan.file_prefix),
            command_line: plan.command_line(),
            version: None,
        };
        let banner = t.answer("while starting", ready_within)?;
        t.version = stats::version(&banner);
        Ok(t)
    }

    /// Sends one command and returns its answer (the text up to the next prompt).
    pub fn command(&mut self, cmd: &str) -> Result<String, DpdkError> {
        self.stdin.write_all(format!("{cmd}\n").as_bytes())?;
        self.stdin.flush()?;
        self.answer(&format!("to '{cmd}'"), ANSWER_WITHIN)
    }

    /// The port's counters now.
    pub fn xstats(&mut self) -> Result<Xstats, DpdkError> {
        let text = self.command("show port xstats 0")?;
        let x = Xstats::parse(&text);
        if x.is_empty() {
            return Err(DpdkError::Io(io::Error::other(format!(
                "no port counters in testpmd's answer: {}",
                text.trim()
            ))));
        }
        Ok(x)
    }

    /// What the forwarding lcores generated and the port refused, so far.
    pub fn fwd_stats(&mut self) -> Result<FwdStats, DpdkError> {
        Ok(FwdStats::parse(&self.command("show fwd stats all")?))
    }

    /// Stops forwarding and quits; kills testpmd if it does not exit in time.
    pub fn quit(&mut self) -> Result<(), DpdkError> {
        let stopped = self.command("stop").and_then(|_| {
            self.stdin.write_all(b"quit\n")?;
            Ok(())
        });
        let until = Instant::now() + QUIT_WITHIN;
        while Instant::now() < until {
            if self.child.try_wait()?.is_some() {
                return stopped;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        stopped.and(Err(DpdkError::Timeout {
            doing: "to 'quit'".into(),
            within: QUIT_WITHIN,
            tail: self.tail(),
        }))
    }

    /// testpmd's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether testpmd is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the next prompt after what was read; the text before it is the answer.
    fn answer(&mut self, doing: &str, within: Duration) -> Result<String, DpdkError> {
        let until = Instant::now() + within;
        let mut guard = self.output.text.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let (text, eof) = &*guard;
            if let Some(at) = text[self.read_to..].find(PROMPT) {
                let answer = text[self.read_to..self.read_to + at].to_string();
                self.read_to += at + PROMPT.len();
                return Ok(answer);
            }
            let now = Instant::now();
            if *eof || now >= until {
                let eof = *eof;
                drop(guard);
                return Err(self.failed(doing, eof, within));
            }
            guard = self
                .output
                .grew
                .wait_timeout(guard, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn failed(&mut self, doing: &str, eof: bool, within: Duration) -> DpdkError {
        let doing = doing.to_string();
        if eof {
            let status = self
                .child
                .wait()
                .map_or_else(|e| e.to_string(), |s| s.to_string());
            return DpdkError::Exited {
                status,
                doing,
                tail: self.tail(),
            };
        }
        DpdkError::Timeout {
            doing,
            within,
            tail: self.tail(),
        }
    }

    /// The last lines testpmd printed.
    fn tail(&self) -> String {
        let guard = self.output.text.lock().unwrap_or_else(|e| e.into_inner());
        let lines: Vec<&str> = guard.0.lines().map(str::trim_end).collect();
        lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        if self.is_running() {
            self.kill();
        }
        let _ = std::fs::remove_dir_all(&self.runtime_dir);
        if let Some(parent) = self.runtime_dir.parent() {
            // Only when empty: other DPDK processes may have theirs there.
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// A pseudo-terminal in raw mode: (master, slave).
fn pty() -> io::Result<(OwnedFd, OwnedFd)> {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors; the name, termios and winsize are unused.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened and are owned by nobody else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    // SAFETY: termios is plain data, filled by tcgetattr before use.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(slave.as_raw_fd(), &mut t) == 0 {
            libc::cfmakeraw(&mut t);
            libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &t);
        }
        // Neither end may leak into another child (a second testpmd would hold this one's
        // terminal open); the child's own copies are made by dup2, which clears the flag.
        for fd in [master.as_raw_fd(), slave.as_raw_fd()] {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
    Ok((master, slave))
}

/// Appends everything testpmd prints; EOF (EIO on a pty) when its last descriptor closes.
fn read_all(mut master: File, out: &Output) {
    let mut buf = [0u8; 8192];
    loop {
        let n = master.read(&mut buf).unwrap_or(0);
        let mut guard = out.text.lock().unwrap_or_else(|e| e.into_inner());
        if n == 0 {
            guard.1 = true;
            out.grew.notify_all();
            return;
        }
        guard.0.push_str(&String::from_utf8_lossy(&buf[..n]));
        out.grew.notify_all();
    }
}
