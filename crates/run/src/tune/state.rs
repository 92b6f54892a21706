//! The tune state file: what `apply` saved and `restore` writes back as root. Whoever can
//! write it chooses what root writes where, so it lives in a directory only its owner can
//! write (`/run/sonde`, 0700, for root), is never reached through a symbolic link, must be
//! ours and 0600, and may only name settings `sonde tune plan` could have changed.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sonde_probe::tune::{Change, Goal, Target};

use super::{tune_err, TuneError};

/// What `apply` saved: enough to put every touched setting back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub goal: Goal,
    pub changes: Vec<Change>,
}

/// Root's private directory for state; others use `$XDG_RUNTIME_DIR/sonde`.
const ROOT_STATE_DIR: &str = "/run/sonde";

/// The sysctls the planner changes (relative to the root), and the per-device files.
pub(crate) const SYSCTLS: [&str; 7] = [
    "proc/sys/net/core/busy_poll",
    "proc/sys/net/core/busy_read",
    "proc/sys/net/core/rmem_max",
    "proc/sys/net/core/wmem_max",
    "proc/sys/net/ipv4/tcp_rmem",
    "proc/sys/net/ipv4/tcp_wmem",
    "proc/sys/net/core/netdev_max_backlog",
];
pub(crate) const NIC_FILES: [&str; 2] = ["napi_defer_hard_irqs", "gro_flush_timeout"];

fn euid() -> u32 {
    // SAFETY: no arguments.
    unsafe { libc::geteuid() }
}

/// The state file `apply` and `restore` use without `--state`, in the private directory
/// (made 0700 when missing, refused when someone else could write it).
pub fn default_state_file() -> Result<PathBuf, TuneError> {
    Ok(private_dir()?.join("tune-state.json"))
}

/// `--state FILE`, or the default state file.
pub fn state_file(given: Option<PathBuf>) -> Result<PathBuf, TuneError> {
    given.map_or_else(default_state_file, Ok)
}

/// `/run/sonde` for root, `$XDG_RUNTIME_DIR/sonde` for others: never a shared /tmp.
pub fn private_dir() -> Result<PathBuf, TuneError> {
    let dir = if euid() == 0 {
        PathBuf::from(ROOT_STATE_DIR)
    } else {
        match std::env::var_os("XDG_RUNTIME_DIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d).join("sonde"),
            _ => return Err(tune_err!("sonde tune keeps its state in a private directory: root uses {ROOT_STATE_DIR}; set XDG_RUNTIME_DIR or pass --state FILE in a directory only you can write")),
        }
    };
    ensure_private_dir(&dir)?;
    Ok(dir)
}

/// Creates `dir` 0700 when missing; refuses it unless it is a real directory of ours that
/// nobody else may enter.
pub(crate) fn ensure_private_dir(dir: &Path) -> Result<(), TuneError> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(tune_err!("cannot create {}: {e}", dir.display()))
        }
        _ => {}
    }
    let m = std::fs::symlink_metadata(dir)
        .map_err(|e| tune_err!("cannot read {}: {e}", dir.display()))?;
    let d = dir.display();
    if !m.is_dir() {
        return Err(tune_err!("refused state directory {d}: not a directory (a symbolic link?); remove it and sonde makes it again"));
    }
    check_owner_mode(&format!("state directory {d}"), &m, 0o077, "chmod 700", &d)
}

fn check_owner_mode(
    what: &str,
    m: &std::fs::Metadata,
    too_open: u32,
    fix: &str,
    path: &std::path::Display,
) -> Result<(), TuneError> {
    let me = euid();
    if m.uid() != me {
        return Err(tune_err!(
            "refused {what}: owned by uid {}, not uid {me}; whoever owns it chooses what root writes where (`chown {me} {path}`)",
            m.uid()
        ));
    }
    if m.mode() & too_open != 0 {
        return Err(tune_err!(
            "refused {what}: mode {:04o} lets others change it; run `{fix} {path}`",
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

/// An explicit `--state` must sit in a directory of ours (or root's) nobody else can write:
/// in /tmp another user could put a file or link there first.
fn check_parent(file: &Path) -> Result<(), TuneError> {
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let m = std::fs::metadata(dir).map_err(|e| {
        tune_err!(
            "cannot use --state {}: no directory {}: {e}",
            file.display(),
            dir.display()
        )
    })?;
    if (m.uid() != euid() && m.uid() != 0) || m.mode() & 0o022 != 0 {
        return Err(tune_err!(
            "refused --state {}: its directory {} (uid {}, mode {:04o}) can be written by others; keep the state in a directory only you can write, such as {ROOT_STATE_DIR} (the default)",
            file.display(),
            dir.display(),
            m.uid(),
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Writes `state` to a new 0600 file next to `file` (O_EXCL, no links followed), then
/// renames it into place: a link or file planted at `file` is replaced, never written through.
pub fn save(file: &Path, state: &State) -> Result<(), TuneError> {
    check_parent(file)?;
    let json = serde_json::to_vec_pretty(state).expect("a state serialises");
    let name = file
        .file_name()
        .ok_or_else(|| tune_err!("--state names no file"))?;
    let tmp = file.with_file_name(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&json).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, file));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(tune_err!("cannot write --state {}: {e}", file.display()));
    }
    Ok(())
}

/// Reads a state file that is ours, 0600 and no link, and that names only what a plan
/// could; anything else is refused before a single setting is written.
pub fn load(root: &Path, file: &Path) -> Result<State, TuneError> {
    check_parent(file)?;
    let f = file.display();
    let mut fd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(file)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => tune_err!(
                "refused --state {f}: a symbolic link; sonde never follows one to its state"
            ),
            _ => tune_err!("cannot read --state {f}: {e}: nothing to restore?"),
        })?;
    let m = fd
        .metadata()
        .map_err(|e| tune_err!("cannot read --state {f}: {e}"))?;
    if !m.is_file() {
        return Err(tune_err!("refused --state {f}: not a regular file"));
    }
    check_owner_mode(&format!("--state {f}"), &m, 0o077, "chmod 600", &f)?;
    let mut bytes = Vec::new();
    fd.read_to_end(&mut bytes)
        .map_err(|e| tune_err!("cannot read --state {f}: {e}"))?;
    let state: State = serde_json::from_slice(&bytes)
        .map_err(|e| tune_err!("--state {f} is not a sonde tune state file: {e}"))?;
    for c in &state.changes {
        if let Err(why) = allowed(root, &c.target).and_then(|()| value_ok(&c.from)) {
            return Err(tune_err!(
                "refused --state {f}: {why}; nothing was restored"
            ));
        }
    }
    Ok(state)
}

/// A change in a `--state` file that no plan could have made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Unplanned {
    #[error("it names {0}, which `sonde tune plan` never changes")]
    Target(String),
    #[error("its value {0:?} is not a number or CPU list")]
    Value(String),
}

/// Whether `target` is one a plan can produce on this host: a known sysctl, a NIC's IRQ
/// affinity, or a per-device setting of an interface that exists here.
fn allowed(root: &Path, target: &Target) -> Result<(), Unplanned> {
    let never = |what: &str| Err(Unplanned::Target(what.to_string()));
    match target {
        Target::File { path } => {
            let parts: Vec<&str> = path.split('/').collect();
            match parts.as_slice() {
                _ if SYSCTLS.contains(&path.as_str()) => Ok(()),
                ["proc", "irq", n, "smp_affinity_list"]
                    if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    Ok(())
                }
                ["sys", "class", "net", dev, file] if NIC_FILES.contains(file) => {
                    known_interface(root, dev)
                        .or_else(|_| never(&format!("{:?}", format!("/{path}"))))
                }
                _ => never(&format!("{:?}", format!("/{path}"))),
            }
        }
        Target::Channels { dev } => {
            known_interface(root, dev).or_else(|_| never(&format!("channels of {dev:?}")))
        }
    }
}

/// An interface name the kernel could have (no slash, not . or .., short) listed under
/// `sys/class/net` here.
fn known_interface(root: &Path, dev: &str) -> Result<(), ()> {
    let shaped = !dev.is_empty()
        && dev.len() < libc::IFNAMSIZ
        && dev != "."
        && dev != ".."
        && !dev
            .bytes()
            .any(|b| b == b'/' || b.is_ascii_whitespace() || b.is_ascii_control());
    let listed = || {
        std::fs::read_dir(root.join("sys/class/net"))
            .map(|d| d.flatten().any(|e| e.file_name() == dev))
            .unwrap_or(false)
    };
    (shaped && listed()).then_some(()).ok_or(())
}

/// A value a plan reads back from these files: numbers, spaces, CPU lists.
fn value_ok(v: &str) -> Result<(), Unplanned> {
    let ok = !v.is_empty()
        && v.len() <= 1024
        && v.bytes().all(|b| b.is_ascii_digit() || b" ,-".contains(&b));
    ok.then_some(())
        .ok_or_else(|| Unplanned::Value(v.to_string()))
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
