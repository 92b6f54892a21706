//! Reading a key file (`--key-file`, `SONDE_KEY_FILE`, the lab's own): the key proves who may make this host send traffic, so a file
//! others can read or change is refused before its bytes are used, as ssh refuses a
//! private key that is too open.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// A key file refused or unreadable; the message names the file and the fix.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct KeyError(pub String);

macro_rules! key_err {
    ($($t:tt)*) => { KeyError(format!($($t)*)) };
}

/// Reads a key file, naming it in any error.
pub fn load_key(path: Option<&Path>) -> Result<Option<sonde_proto::Key>, KeyError> {
    let Some(path) = path else { return Ok(None) };
    let bytes = read_private("--key-file", path)?;
    sonde_proto::Key::from_file_bytes(&bytes)
        .map(Some)
        .map_err(|e| key_err!("--key-file {}: {e}", path.display()))
}

/// The bytes of the secret file `flag` names, once it is a regular file that only its
/// owner (us or root) may read: opened non-blocking so that a FIFO cannot hang the agent,
/// checked on the open file. Errors name the flag and the file.
pub fn read_private(flag: &str, path: &Path) -> Result<Vec<u8>, KeyError> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| key_err!("cannot read {flag} {}: {e}", path.display()))?;
    let meta = f
        .metadata()
        .map_err(|e| key_err!("cannot read {flag} {}: {e}", path.display()))?;
    // SAFETY: no arguments.
    let euid = unsafe { libc::geteuid() };
    check(flag, path, meta.is_file(), meta.uid(), meta.mode(), euid)?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)
        .map_err(|e| key_err!("cannot read {flag} {}: {e}", path.display()))?;
    Ok(bytes)
}

/// ssh's rule, made a little stricter: a key we own has no group or other bits; one root
/// owns (a Kubernetes Secret, 0440 for the pod's fsGroup) may be group-readable, never
/// group-writable nor readable by others; any other owner could change it.
fn check(
    flag: &str,
    path: &Path,
    regular: bool,
    uid: u32,
    mode: u32,
    euid: u32,
) -> Result<(), KeyError> {
    let p = path.display();
    if !regular {
        return Err(key_err!("refused {flag} {p}: not a regular file"));
    }
    if uid != euid && uid != 0 {
        return Err(key_err!("refused {flag} {p}: owned by uid {uid}, who could change it; it must be owned by uid {euid} or root (`chown {euid} {p}`)"));
    }
    let too_open = if uid == euid { 0o077 } else { 0o027 };
    if mode & too_open != 0 {
        return Err(key_err!(
            "refused {flag} {p}: mode {:04o} lets others read or change it; run `chmod 600 {p}`",
            mode & 0o7777
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(regular: bool, uid: u32, mode: u32, euid: u32) -> String {
        check("--key-file", Path::new("/k"), regular, uid, mode, euid)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn open_keys_are_refused_with_the_fix() {
        for mode in [0o100644, 0o100666, 0o100640, 0o100604, 0o100620] {
            let e = err(true, 1000, mode, 1000);
            assert!(e.contains("/k") && e.contains("chmod 600 /k"), "{e}");
            assert!(e.contains(&format!("{:04o}", mode & 0o7777)), "{e}");
        }
        assert!(err(true, 0, 0o100444, 1000).contains("chmod 600"));
        assert!(err(true, 0, 0o100460, 1000).contains("chmod 600"));
        assert!(err(false, 1000, 0o010600, 1000).contains("not a regular file"));
        assert!(err(true, 1001, 0o100600, 1000).contains("owned by uid 1001"));
    }

    #[test]
    fn private_keys_and_root_secrets_for_a_group_pass() {
        let ok =
            |uid, mode, euid| check("--key-file", Path::new("/k"), true, uid, mode, euid).is_ok();
        assert!(ok(1000, 0o100600, 1000));
        assert!(ok(1000, 0o100400, 1000));
        assert!(ok(0, 0o100600, 0));
        // A Kubernetes Secret mounted with defaultMode 0440 and an fsGroup.
        assert!(ok(0, 0o100440, 65534));
        assert!(!ok(0, 0o100440, 0));
    }
}
