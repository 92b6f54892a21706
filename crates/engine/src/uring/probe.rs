//! Whether this host can run the io_uring engine, found once per process by building the
//! ring the workers build and asking for every operation they submit. Why not is said in
//! the words an operator acts on: the sysctl, a seccomp filter or container policy, or the
//! kernel version that added what is missing.

use std::io;
use std::path::Path;
use std::sync::OnceLock;

use io_uring::{opcode, Probe};

/// Why the io_uring engine cannot run on this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    #[error("io_uring is disabled here (sysctl kernel.io_uring_disabled = {0})")]
    Disabled(String),
    #[error(
        "io_uring_setup is not permitted for this process (a seccomp filter, or a \
         container's policy): {0}"
    )]
    NotPermitted(String),
    #[error("this kernel has no io_uring (io_uring_setup: {0})")]
    NoSyscall(String),
    #[error("this kernel's io_uring lacks {what} (Linux {since} or later): {err}")]
    Missing {
        what: &'static str,
        since: &'static str,
        err: String,
    },
}

/// Whether the engine can run here; the probe runs once per process.
pub fn available() -> Result<(), Unavailable> {
    static FOUND: OnceLock<Result<(), Unavailable>> = OnceLock::new();
    FOUND
        .get_or_init(|| probe(Path::new("/proc/sys/kernel/io_uring_disabled")))
        .clone()
}

fn probe(sysctl: &Path) -> Result<(), Unavailable> {
    let ring = super::ring::builder()
        .build(8)
        .map_err(|e| classify(&e, sysctl))?;
    let mut found = Probe::new();
    ring.submitter()
        .register_probe(&mut found)
        .map_err(|e| missing("the opcode probe", "5.6", &e))?;
    for (code, what, since) in [
        (opcode::Send::CODE, "IORING_OP_SEND", "5.6"),
        (opcode::SendZc::CODE, "IORING_OP_SEND_ZC", "6.0"),
        (opcode::RecvMulti::CODE, "IORING_OP_RECV", "5.6"),
        (opcode::RecvMsgMulti::CODE, "IORING_OP_RECVMSG", "5.3"),
        (opcode::SendMsg::CODE, "IORING_OP_SENDMSG", "5.3"),
    ] {
        if !found.is_supported(code) {
            let err = "not in the kernel's opcode probe".into();
            return Err(Unavailable::Missing { what, since, err });
        }
    }
    if !ring.params().is_feature_ext_arg() {
        let err = "IORING_FEAT_EXT_ARG not offered".into();
        return Err(Unavailable::Missing {
            what: "waits with a timeout",
            since: "5.11",
            err,
        });
    }
    // A buffer ring of one entry, registered and dropped: multishot receive needs one.
    super::bufs::BufRing::register(&ring, 1, 1, 64)
        .map(drop)
        .map_err(|e| missing("provided buffer rings", "5.19", &e))
}

fn missing(what: &'static str, since: &'static str, e: &io::Error) -> Unavailable {
    Unavailable::Missing {
        what,
        since,
        err: e.to_string(),
    }
}

/// Why `io_uring_setup` with the workers' flags failed.
fn classify(e: &io::Error, sysctl: &Path) -> Unavailable {
    let disabled = std::fs::read_to_string(sysctl)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|v| v != "0");
    match (e.raw_os_error(), disabled) {
        (Some(libc::EPERM), Some(v)) => Unavailable::Disabled(v),
        (Some(libc::EPERM | libc::EACCES), None) => Unavailable::NotPermitted(e.to_string()),
        (Some(libc::ENOSYS), _) => Unavailable::NoSyscall(e.to_string()),
        _ => Unavailable::Missing {
            what: "IORING_SETUP_SINGLE_ISSUER and IORING_SETUP_DEFER_TASKRUN",
            since: "6.1",
            err: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    #[test]
    fn each_failure_names_what_to_change() {
        let dir = std::env::temp_dir().join(format!("sonde-uring-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sysctl = dir.join("io_uring_disabled");
        std::fs::write(&sysctl, "2\n").unwrap();
        let d = classify(&err(libc::EPERM), &sysctl).to_string();
        assert!(d.contains("kernel.io_uring_disabled = 2"), "{d}");
        std::fs::write(&sysctl, "0\n").unwrap();
        let p = classify(&err(libc::EPERM), &sysctl).to_string();
        assert!(p.contains("seccomp"), "{p}");
        let n = classify(&err(libc::ENOSYS), &sysctl).to_string();
        assert!(n.contains("no io_uring"), "{n}");
        let m = classify(&err(libc::EINVAL), &sysctl).to_string();
        assert!(m.contains("DEFER_TASKRUN") && m.contains("6.1"), "{m}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn this_kernel_runs_the_engine() {
        // CI's kernel and this machine's are 6.x; a host without io_uring says why.
        if let Err(e) = available() {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("io_uring engine unavailable on CI: {e}");
            }
            println!("SKIPPED: needs io_uring ({e})");
        }
    }
}
