//! A congestion control name from the network, checked before any socket is made: as
//! root, TCP_CONGESTION with a name the kernel does not have makes it load the module
//! `tcp_NAME`, so an agent sets only what its host already offers.

use std::path::Path;

use sonde_results::{SpecError, TestSpec};

/// The algorithms this host's kernel offers without loading anything.
const AVAILABLE: &str = "proc/sys/net/ipv4/tcp_available_congestion_control";

/// Refuses a spec's congestion control that `root`'s kernel does not offer, listing what
/// it does.
pub fn check(spec: &TestSpec, root: &Path) -> Result<(), SpecError> {
    let TestSpec::Stream(s) = spec else {
        return Ok(());
    };
    let Some(cc) = &s.congestion else {
        return Ok(());
    };
    let text = std::fs::read_to_string(root.join(AVAILABLE)).unwrap_or_default();
    let offered: Vec<&str> = text.split_whitespace().collect();
    if offered.contains(&cc.as_str()) {
        return Ok(());
    }
    // The spec's own check allows only an algorithm name's characters: safe to print.
    let shown: String = cc.chars().take(32).collect();
    Err(SpecError {
        flag: "--congestion",
        reason: format!(
            "'{shown}' is not available on this agent (available: {}); an agent loads no kernel module for a controller: its operator can load one (modprobe tcp_NAME) to allow it",
            if offered.is_empty() { "none listed" } else { text.trim() }
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::StreamSpec;

    fn with(cc: &str) -> TestSpec {
        TestSpec::Stream(StreamSpec {
            congestion: Some(cc.into()),
            ..StreamSpec::default()
        })
    }

    #[test]
    fn only_what_the_kernel_offers() {
        let dir = std::env::temp_dir().join(format!("sonde-cc-{}", std::process::id()));
        let file = dir.join(AVAILABLE);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "reno cubic\n").unwrap();
        assert!(check(&with("cubic"), &dir).is_ok());
        let e = check(&with("sonde_evil"), &dir).unwrap_err();
        assert_eq!(e.flag, "--congestion");
        assert!(e.reason.contains("available: reno cubic"), "{}", e.reason);
        assert!(check(&TestSpec::Stream(StreamSpec::default()), &dir).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
