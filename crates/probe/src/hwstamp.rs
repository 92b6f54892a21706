//! What a device can stamp in hardware: `ethtool -T DEV`'s text parsed by a pure function
//! ([`parse_ethtool_t`]), the device's PTP hardware clock read under a root path
//! ([`read_phc`]), and the two judged together ([`HwCapability::judge`]). Reading only:
//! switching the NIC's stamping on is the run layer's (`sonde_run::hwstamps`), behind the
//! agent's `--allow hwstamps`.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::{FormatError, ProbeError};

/// What `ethtool -T` says of a device, word for word (the parenthesised flag names of
/// older ethtool releases dropped).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TsInfo {
    /// `hardware-transmit`, `software-receive`, `hardware-raw-clock`, ...
    pub capabilities: Vec<String>,
    /// The PTP hardware clock's index (`/dev/ptpN`); `None` for `none`.
    pub phc: Option<u32>,
    /// `off`, `on`, `onestep-sync`, ...
    pub tx_modes: Vec<String>,
    /// `none`, `all`, `ptpv2-event`, ...
    pub rx_filters: Vec<String>,
}

impl TsInfo {
    fn has(list: &[String], word: &str) -> bool {
        list.iter().any(|w| w == word)
    }

    pub fn capability(&self, word: &str) -> bool {
        Self::has(&self.capabilities, word)
    }
}

/// The section of `ethtool -T`'s output a list item belongs to.
#[derive(Clone, Copy)]
enum Section {
    None,
    Capabilities,
    Tx,
    Rx,
}

/// Parses `ethtool -T DEV`'s output (ethtool 5.x and 6.x). Unknown `Key: value` lines
/// (later releases add some) are skipped; text without the header and the capabilities
/// is not ethtool's and is refused.
pub fn parse_ethtool_t(text: &str) -> Result<TsInfo, FormatError> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    match lines.next() {
        Some(l) if l.starts_with("Time stamping parameters for ") => {}
        Some(l) => {
            return Err(FormatError::Line {
                what: "not ethtool -T's first line (Time stamping parameters for DEV:)",
                line: l.to_string(),
            })
        }
        None => return Err(FormatError::missing("ethtool -T printed nothing")),
    }
    let mut info = TsInfo::default();
    let (mut section, mut saw_caps, mut saw_phc) = (Section::None, false, false);
    for line in lines {
        if line.starts_with([' ', '\t']) {
            let word = line
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            match section {
                Section::Capabilities => info.capabilities.push(word),
                Section::Tx => info.tx_modes.push(word),
                Section::Rx => info.rx_filters.push(word),
                Section::None => {
                    return Err(FormatError::Line {
                        what: "an indented line outside a list",
                        line: line.to_string(),
                    })
                }
            }
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(FormatError::Line {
                what: "neither `Key:` nor an indented list item",
                line: line.to_string(),
            });
        };
        let value = value.trim();
        // A list's header says `none` on the same line when the list is empty.
        let listed = |s| if value.is_empty() { s } else { Section::None };
        section = match key.trim() {
            "Capabilities" => {
                saw_caps = true;
                listed(Section::Capabilities)
            }
            "Hardware Transmit Timestamp Modes" => listed(Section::Tx),
            "Hardware Receive Filter Modes" => listed(Section::Rx),
            "PTP Hardware Clock" => {
                saw_phc = true;
                info.phc =
                    match value {
                        "none" => None,
                        n => Some(n.parse().map_err(|e| {
                            FormatError::field(format!("PTP Hardware Clock {n:?}"), e)
                        })?),
                    };
                Section::None
            }
            _ => Section::None,
        };
    }
    if !saw_caps || !saw_phc {
        return Err(FormatError::missing(
            "ethtool -T's Capabilities or PTP Hardware Clock line",
        ));
    }
    Ok(info)
}

/// Runs `ethtool -T DEV` (the one on PATH) and returns its output.
pub fn ethtool_t(dev: &str) -> Result<String, String> {
    let out = Command::new("ethtool")
        .args(["-T", dev])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run ethtool -T {dev}: {e} (is ethtool installed?)"))?;
    if !out.status.success() {
        return Err(format!(
            "ethtool -T {dev} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The PTP hardware clocks `root/sys/class/net/DEV/device/ptp/` lists (`ptpN`), in
/// order; none for a virtual device (no `device`) or a NIC without one. A device that is
/// not there at all is an error naming it.
pub fn read_phc(root: &Path, dev: &str) -> Result<Vec<u32>, ProbeError> {
    let net = root.join("sys/class/net").join(dev);
    if let Err(source) = std::fs::metadata(&net) {
        return Err(ProbeError::Read { path: net, source });
    }
    let Ok(dir) = std::fs::read_dir(net.join("device/ptp")) else {
        return Ok(Vec::new());
    };
    let mut clocks: Vec<u32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("ptp")?.parse().ok())
        .collect();
    clocks.sort_unstable();
    Ok(clocks)
}

/// A device's hardware stamping as this tool needs it: every packet stamped both ways,
/// on a PTP clock the system shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HwCapability {
    pub device: String,
    /// The PHC stamps are taken on (`/dev/ptpN`), when the device has a usable one.
    pub phc: Option<u32>,
    /// Why this device cannot stamp our packets in hardware; `None`: it can.
    pub lacking: Option<String>,
}

impl HwCapability {
    /// Judges `info` (ethtool's word) against the clocks `/sys` shows (`phcs`, from
    /// [`read_phc`]): hardware transmit and receive stamps on a raw hardware clock,
    /// transmit mode `on` and receive filter `all` (our messages are not PTP packets, so a
    /// PTP-only filter would stamp none of them), and the PHC ethtool names under the
    /// device in `/sys`.
    pub fn judge(device: &str, info: &TsInfo, phcs: &[u32]) -> HwCapability {
        let needs = [
            ("hardware-transmit", info.capability("hardware-transmit")),
            ("hardware-receive", info.capability("hardware-receive")),
            ("hardware-raw-clock", info.capability("hardware-raw-clock")),
            ("transmit mode on", TsInfo::has(&info.tx_modes, "on")),
            ("receive filter all", TsInfo::has(&info.rx_filters, "all")),
        ];
        let missing: Vec<&str> = needs.iter().filter(|(_, h)| !h).map(|(n, _)| *n).collect();
        let lacking = match info.phc {
            None => Some("no PTP hardware clock (ethtool -T: PTP Hardware Clock: none)".into()),
            Some(_) if !missing.is_empty() => {
                Some(format!("ethtool -T lacks {}", missing.join(", ")))
            }
            Some(n) if !phcs.contains(&n) => Some(format!(
                "ethtool -T names ptp{n}, which /sys/class/net/{device}/device/ptp does not hold"
            )),
            Some(_) => None,
        };
        HwCapability {
            device: device.to_string(),
            phc: info.phc.filter(|_| lacking.is_none()),
            lacking,
        }
    }

    /// Reads and judges `dev`: `/sys` under `root`, `ethtool -T` from PATH. A device
    /// whose reading fails cannot stamp in hardware, and says why.
    pub fn read(root: &Path, dev: &str) -> HwCapability {
        let judged = ethtool_t(dev).and_then(|text| {
            let info = parse_ethtool_t(&text)
                .map_err(|e| format!("cannot parse ethtool -T {dev}'s output: {e}"))?;
            let phcs = read_phc(root, dev).map_err(|e| e.to_string())?;
            Ok(HwCapability::judge(dev, &info, &phcs))
        });
        judged.unwrap_or_else(|why| HwCapability {
            device: dev.to_string(),
            phc: None,
            lacking: Some(why),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    fn text(name: &str) -> String {
        std::fs::read_to_string(fixture("ethtool-T").join(name)).unwrap()
    }

    fn words(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_nic_with_a_clock_stamping_every_packet() {
        let info = parse_ethtool_t(&text("nic-all.txt")).unwrap();
        assert_eq!(info.phc, Some(0));
        assert_eq!(
            info.capabilities,
            words(&[
                "hardware-transmit",
                "software-transmit",
                "hardware-receive",
                "software-receive",
                "software-system-clock",
                "hardware-raw-clock"
            ])
        );
        assert_eq!(info.tx_modes, words(&["off", "on"]));
        assert_eq!(info.rx_filters, words(&["none", "all"]));
        let cap = HwCapability::judge("enp1s0", &info, &[0]);
        assert_eq!((cap.phc, cap.lacking), (Some(0), None));
    }

    /// ethtool 6.x's spelling; a NIC that stamps PTP event packets only cannot stamp ours.
    #[test]
    fn a_ptp_only_filter_is_not_enough() {
        let info = parse_ethtool_t(&text("nic-ptp-only.txt")).unwrap();
        assert_eq!(info.phc, Some(0));
        assert_eq!(info.rx_filters, words(&["none", "ptpv2-event"]));
        assert_eq!(info.tx_modes.len(), 4);
        let cap = HwCapability::judge("eth0", &info, &[0]);
        assert_eq!(cap.phc, None);
        let why = cap.lacking.unwrap();
        assert!(why.contains("receive filter all"), "{why}");
    }

    #[test]
    fn loopback_and_veth_have_no_clock() {
        for name in ["lo.txt", "veth.txt"] {
            let info = parse_ethtool_t(&text(name)).unwrap();
            assert_eq!(info.phc, None, "{name}");
            assert!(info.tx_modes.is_empty() && info.rx_filters.is_empty());
            assert!(info.capability("software-receive"));
            let why = HwCapability::judge("veth0", &info, &[]).lacking.unwrap();
            assert!(why.contains("no PTP hardware clock"), "{why}");
        }
    }

    #[test]
    fn garbage_is_refused() {
        for bad in [
            "",
            "ethtool: bad command line argument(s)\n",
            "Time stamping parameters for x:\nPTP Hardware Clock: 0\n",
            "Time stamping parameters for x:\nCapabilities:\nPTP Hardware Clock: zero\n",
            "Time stamping parameters for x:\n\thardware-transmit\n",
        ] {
            assert!(parse_ethtool_t(bad).is_err(), "{bad:?}");
        }
    }

    /// The clock ethtool names must be the device's under /sys.
    #[test]
    fn the_clock_is_read_from_sys() {
        let root = std::env::temp_dir().join(format!("sonde-hwstamp-{}", std::process::id()));
        let ptp = root.join("sys/class/net/eth9/device/ptp");
        std::fs::create_dir_all(ptp.join("ptp3")).unwrap();
        std::fs::create_dir_all(root.join("sys/class/net/veth9")).unwrap();
        assert_eq!(read_phc(&root, "eth9").unwrap(), [3]);
        assert_eq!(read_phc(&root, "veth9").unwrap(), Vec::<u32>::new());
        let e = read_phc(&root, "nope0").unwrap_err().to_string();
        assert!(e.contains("nope0"), "{e}");
        let info = parse_ethtool_t(&text("nic-all.txt")).unwrap();
        let why = HwCapability::judge("eth9", &info, &[3]).lacking.unwrap();
        assert!(why.contains("ptp0"), "{why}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
