//! Network namespaces for the lab and the tests: one builder, so that `sonde lab` and the
//! test harness make (and delete) the same thing. Each namespace is owned: dropping it
//! deletes it, also when building failed half way or a test panicked. Tests run on
//! 198.18.0.0/15 (RFC 2544's benchmark range) only.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};

/// The lab's two ends over one veth pair.
pub const CLIENT_ADDR: &str = "198.18.0.1";
pub const SERVER_ADDR: &str = "198.18.0.2";

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NetnsError(pub String);

/// Runs `ip ARGS`; its stderr is the error.
pub fn ip(args: &[&str]) -> Result<(), NetnsError> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| NetnsError(format!("cannot run `ip` (install iproute2): {e}")))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        return Err(NetnsError(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            why.trim()
        )));
    }
    Ok(())
}

/// One named network namespace; dropping it deletes it.
#[derive(Debug)]
pub struct Namespace {
    name: String,
}

impl Namespace {
    /// `ip netns add NAME`, with its loopback up.
    pub fn add(name: &str) -> Result<Namespace, NetnsError> {
        ip(&["netns", "add", name])?;
        let ns = Namespace { name: name.into() };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n NAME ARGS`.
    pub fn ip(&self, args: &[&str]) -> Result<(), NetnsError> {
        ip(&[&["-n", &self.name][..], args].concat())
    }

    /// `program` to run inside the namespace (`ip netns exec`).
    pub fn exec(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        exec_in(&self.name, program)
    }

    /// Gives interface `dev` the address `cidr` and brings it up.
    pub fn address(&self, dev: &str, cidr: &str) -> Result<(), NetnsError> {
        self.ip(&["addr", "add", cidr, "dev", dev])?;
        self.ip(&["link", "set", dev, "up"])
    }

    /// Runs `f` on a thread of its own inside the namespace, as `ip netns exec` would run
    /// a process: its network namespace, and /sys mounted for it (a private mount
    /// namespace), so that interface files are the namespace's. Threads `f` starts are in
    /// it too; the rest of the process is not.
    pub fn run_inside<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, NetnsError> {
        std::thread::scope(|s| {
            s.spawn(|| {
                enter(&self.name)?;
                Ok(f())
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stderr(Stdio::null())
            .status();
    }
}

/// `program` inside namespace `name` (`ip netns exec NAME program`).
pub fn exec_in(name: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", name]).arg(program);
    c
}

/// A veth pair: `a_if` in `a`, `b_if` in `b`.
pub fn veth(a: &str, a_if: &str, b: &str, b_if: &str) -> Result<(), NetnsError> {
    ip(&[
        "link", "add", a_if, "netns", a, "type", "veth", "peer", "name", b_if, "netns", b,
    ])
}

/// Two namespaces joined by a veth pair, CLIENT_ADDR and SERVER_ADDR (/24), up.
#[derive(Debug)]
pub struct Pair {
    pub client: Namespace,
    pub server: Namespace,
    pub client_if: String,
    pub server_if: String,
}

impl Pair {
    /// `PREFIX-TAG-c` and `PREFIX-TAG-s` joined by `IFTAGc` / `IFTAGs`.
    pub fn create(prefix: &str, tag: &str, if_prefix: &str) -> Result<Pair, NetnsError> {
        let (client_if, server_if) = (format!("{if_prefix}{tag}c"), format!("{if_prefix}{tag}s"));
        if client_if.len() > 15 {
            return Err(NetnsError(format!(
                "namespace tag '{tag}' too long for an interface name"
            )));
        }
        // SAFETY: no arguments.
        if unsafe { libc::geteuid() } != 0 {
            return Err(NetnsError("not root".into()));
        }
        let pair = Pair {
            client: Namespace::add(&format!("{prefix}-{tag}-c"))?,
            // From here on, dropping removes whatever was made.
            server: Namespace::add(&format!("{prefix}-{tag}-s"))?,
            client_if,
            server_if,
        };
        veth(
            pair.client.name(),
            &pair.client_if,
            pair.server.name(),
            &pair.server_if,
        )?;
        pair.client
            .address(&pair.client_if, &format!("{CLIENT_ADDR}/24"))?;
        pair.server
            .address(&pair.server_if, &format!("{SERVER_ADDR}/24"))?;
        Ok(pair)
    }
}

/// Moves the calling thread into namespace `name` as `ip netns exec` moves a process: a
/// mount namespace of its own (changes not propagated back), the network namespace, a
/// sysfs of that network namespace on /sys and this thread's /proc/net on /proc/net.
fn enter(name: &str) -> Result<(), NetnsError> {
    let fail = |what: &str| NetnsError(format!("{what}: {}", std::io::Error::last_os_error()));
    let path = Path::new("/run/netns").join(name);
    let f = File::open(&path)
        .map_err(|e| NetnsError(format!("cannot open {}: {e}", path.display())))?;
    let none = c"none";
    // SAFETY: plain syscalls on this thread with valid C strings and an open namespace fd.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(fail("unshare(CLONE_NEWNS)"));
        }
        let flags = libc::MS_SLAVE | libc::MS_REC;
        if libc::mount(
            none.as_ptr(),
            c"/".as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        ) != 0
        {
            return Err(fail("mount --make-rslave /"));
        }
        if libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
            return Err(fail(&format!("setns {name}")));
        }
        libc::umount2(c"/sys".as_ptr(), libc::MNT_DETACH);
        let sysfs = c"sysfs";
        if libc::mount(
            sysfs.as_ptr(),
            c"/sys".as_ptr(),
            sysfs.as_ptr(),
            0,
            std::ptr::null(),
        ) != 0
        {
            return Err(fail("mount sysfs"));
        }
        // /proc/net is the process's (its first thread's) namespace: this thread's instead.
        let (net, bind) = (c"/proc/thread-self/net", libc::MS_BIND);
        let none = std::ptr::null();
        if libc::mount(
            net.as_ptr(),
            c"/proc/net".as_ptr(),
            none,
            bind,
            std::ptr::null(),
        ) != 0
        {
            return Err(fail("mount --bind /proc/thread-self/net /proc/net"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread inside a pair's client namespace sees its interface in /sys, its routes in
    /// /proc/net; the rest of the process does not.
    #[test]
    fn a_thread_inside_sees_the_namespaces_files() {
        // SAFETY: no arguments.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let tag = format!("n{}", std::process::id() % 100_000);
        let Ok(pair) = Pair::create("sonde", &tag, "nt") else {
            return;
        };
        let sys = format!("/sys/class/net/{}", pair.client_if);
        let (has_if, routes) = pair
            .client
            .run_inside(|| {
                let routes = std::fs::read_to_string("/proc/net/route").unwrap();
                (Path::new(&sys).exists(), routes)
            })
            .unwrap();
        assert!(has_if, "{sys} inside");
        assert!(routes.contains(&pair.client_if), "{routes}");
        assert!(!Path::new(&sys).exists(), "{sys} outside");
    }
}
