//! Key files for the tests' agents and controllers: owner-only (0600), as sonde requires.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::scratch_dir;

/// This test process's key file (0600, random), made once.
pub fn key_file() -> &'static Path {
    static KEY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let path = scratch_dir().join("key");
        let mut seed = [0u8; 24];
        File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut seed))
            .unwrap();
        let text: String = seed.iter().map(|b| format!("{b:02x}")).collect();
        let _ = std::fs::remove_file(&path);
        key_file_at(path, &text)
    })
}

/// A new key file (0600) at `path` holding `text`.
pub fn key_file_at(path: PathBuf, text: &str) -> PathBuf {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
    path
}
