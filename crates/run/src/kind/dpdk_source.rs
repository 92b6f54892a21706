//! Where a side's testpmd arguments and device come from. On the controller's own host
//! they are its user's command line, taken as given. On an agent they came over the
//! network, and testpmd runs as root: an EAL `-d LIB` loads a library, a vdev's
//! `tx_pcap=PATH` writes a file. So an agent takes from a spec only a short list of
//! switches with range-checked numbers, and a device this host has; everything else comes
//! from its own configuration (`sonde serve --dpdk-args/--dpdk-dev`). Either way the
//! result is a `DpdkSpec` that [`super::dpdk::setup`] and `Setup::plan` turn into the one
//! command line.

use std::path::Path;

use sonde_engine::dpdk::Device;
use sonde_probe::{dpdk as probe_dpdk, inventory};
use sonde_results::{DpdkSpec, Role, SpecError, TestSpec};

/// Largest memory, in MiB, a controller may ask testpmd for (`-m`, `--socket-mem`).
const MAX_MEMORY_MB: u64 = 65_536;
/// NUMA nodes `--socket-mem` may name.
const MAX_SOCKETS: usize = 8;

/// The switches an agent takes from a controller, for its refusals.
pub const ALLOWED: &str = "EAL: --no-huge, -m MB, --socket-mem MB[,MB...]; testpmd: --mbcache=N (0-512), --rxd=N, --txd=N (64-32768), --burst=N (1-512)";

/// Why `sonde serve`'s own DPDK flags cannot be used; [`AgentDpdkError::flag`] names the
/// flag at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentDpdkError {
    #[error("--dpdk-args and --dpdk-dev are for --allow dpdk, which is not given")]
    NotAllowed,
    #[error("--dpdk-args {args:?}: {reason}")]
    Args { args: String, reason: String },
    #[error("--dpdk-dev: {0}")]
    Device(#[from] sonde_engine::dpdk::NotADevice),
}

impl AgentDpdkError {
    /// The flag at fault.
    pub fn flag(&self) -> &'static str {
        match self {
            AgentDpdkError::NotAllowed | AgentDpdkError::Args { .. } => "--dpdk-args",
            AgentDpdkError::Device(_) => "--dpdk-dev",
        }
    }
}

/// The agent's own DPDK configuration: `sonde serve --dpdk-args "EAL... -- TESTPMD..."`
/// and `--dpdk-dev DEV`, given by its operator and so trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentDpdk {
    pub eal_args: Vec<String>,
    pub testpmd_args: Vec<String>,
    pub device: Option<Device>,
}

impl AgentDpdk {
    /// From `sonde serve`'s `--dpdk-args` (one shell-quoted string) and `--dpdk-dev`,
    /// refused without `--allow dpdk` (`allowed`), where they would do nothing.
    pub fn from_flags(
        args: Option<&str>,
        device: Option<&str>,
        allowed: bool,
    ) -> Result<AgentDpdk, AgentDpdkError> {
        if (args.is_some() || device.is_some()) && !allowed {
            return Err(AgentDpdkError::NotAllowed);
        }
        let words = match args {
            Some(a) => shell_words::split(a).map_err(|e| AgentDpdkError::Args {
                args: a.into(),
                reason: e.to_string(),
            })?,
            None => Vec::new(),
        };
        AgentDpdk::new(&words, device)
    }

    /// From the serve flags' words (split at `--`, as the controller's `--dpdk-args`) and
    /// device; a device that is not one names `--dpdk-dev`.
    pub fn new(words: &[String], device: Option<&str>) -> Result<AgentDpdk, AgentDpdkError> {
        let (eal_args, testpmd_args) = DpdkSpec::split_args(words);
        let device = device
            .map(Device::parse)
            .transpose()
            .map_err(AgentDpdkError::Device)?;
        Ok(AgentDpdk {
            eal_args,
            testpmd_args,
            device,
        })
    }
}

/// Who gave the spec's DPDK part.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// This host's user, on its own command line: taken as given.
    Local,
    /// A controller over the network, to an agent configured with this.
    Remote(&'a AgentDpdk),
}

/// Fits `spec`'s DPDK part (if any) for `role`'s testpmd on this host as `source` may
/// have it: a remote spec keeps only `role`'s allowlisted switches (the other side's are
/// dropped: they are not this host's), after which the agent's own arguments come (they
/// have the last word), and a device this host has.
pub fn confine(spec: &mut TestSpec, role: Role, source: Source<'_>) -> Result<(), SpecError> {
    let Source::Remote(agent) = source else {
        return Ok(());
    };
    let TestSpec::Pps(p) = spec else {
        return Ok(());
    };
    let Some(d) = p.dpdk.as_deref_mut() else {
        return Ok(());
    };
    let (asked_eal, asked_testpmd) = d.args(role);
    let flag = role.pick("--dpdk-args", "--server-dpdk-args");
    let args_error = |e: WordRefused| SpecError {
        flag,
        reason: e.to_string(),
    };
    let mut eal = check_eal(asked_eal).map_err(args_error)?;
    let mut testpmd = check_testpmd(asked_testpmd).map_err(args_error)?;
    eal.extend(agent.eal_args.iter().cloned());
    testpmd.extend(agent.testpmd_args.iter().cloned());
    let asked = role.pick(&d.client_device, &d.server_device).clone();
    let device = match asked {
        Some(s) => Some(
            check_device(&s, agent, Path::new("/")).map_err(|e| SpecError {
                flag: role.pick("--dpdk-dev", "--server-dpdk-dev"),
                reason: e.to_string(),
            })?,
        ),
        None => agent.device.as_ref().map(device_word),
    };
    let (e, t) = d.args_mut(role.pick(Role::Server, Role::Client));
    e.clear();
    t.clear();
    let (e, t) = d.args_mut(role);
    (*e, *t) = (eal, testpmd);
    d.client_device = role.pick(device.clone(), None);
    d.server_device = role.pick(None, device);
    Ok(())
}

/// A device as `Device::parse` reads it back.
fn device_word(d: &Device) -> String {
    match d {
        Device::Pci(s) => s.clone(),
        Device::Vdev(v) => format!("--vdev={v}"),
    }
}

/// At most 64 characters of a word from the network, its control characters escaped.
fn shown(w: &str) -> String {
    let cut: String = w.chars().take(64).collect();
    format!("{cut:?}")
}

/// A DPDK word from a controller this agent does not take; the words are shown as
/// [`shown`] cuts them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WordRefused {
    #[error("{} is not among the switches an agent takes from a controller ({ALLOWED}): start the agent with --dpdk-args \"EAL... -- TESTPMD...\" to give its testpmd other arguments", shown(.0))]
    NotAllowed(String),
    #[error("{what} {} is not a number in {lo}..={hi}", shown(.word))]
    NotNumber {
        what: String,
        word: String,
        lo: u64,
        hi: u64,
    },
    #[error("--socket-mem names more than {MAX_SOCKETS} nodes")]
    TooManyNodes,
    #[error("{0} needs a value")]
    NeedsValue(String),
}

/// A device a controller named that is not this agent's to use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {why} (start the agent with --dpdk-dev DEV to have it use that device)", shown(.asked))]
pub struct DeviceRefused {
    pub asked: String,
    pub why: NotOurs,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotOurs {
    #[error(transparent)]
    NotADevice(#[from] sonde_engine::dpdk::NotADevice),
    #[error("an agent takes no virtual device from a controller, only its own")]
    Virtual,
    #[error("an agent takes no device arguments from a controller, only its own")]
    DeviceArgs,
    #[error("not a network device of this host")]
    NotNetwork,
}

/// A whole number in `lo..=hi`, or why not.
fn number(w: &str, what: &str, lo: u64, hi: u64) -> Result<u64, WordRefused> {
    match w.parse::<u64>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(WordRefused::NotNumber {
            what: what.to_string(),
            word: w.to_string(),
            lo,
            hi,
        }),
    }
}

/// `--socket-mem`'s per-node MiB list.
fn socket_mem(w: &str) -> Result<(), WordRefused> {
    let parts: Vec<&str> = w.split(',').collect();
    if parts.len() > MAX_SOCKETS {
        return Err(WordRefused::TooManyNodes);
    }
    for p in parts {
        number(p, "--socket-mem", 0, MAX_MEMORY_MB)?;
    }
    Ok(())
}

/// The EAL words a controller may give, validated and returned as they will be passed.
pub fn check_eal(words: &[String]) -> Result<Vec<String>, WordRefused> {
    let mut out = Vec::new();
    let mut it = words.iter();
    while let Some(w) = it.next() {
        let value = |it: &mut std::slice::Iter<'_, String>| {
            it.next()
                .cloned()
                .ok_or_else(|| WordRefused::NeedsValue(w.clone()))
        };
        match w.as_str() {
            "--no-huge" => out.push(w.clone()),
            "-m" => {
                let v = value(&mut it)?;
                number(&v, "-m", 1, MAX_MEMORY_MB)?;
                out.extend([w.clone(), v]);
            }
            "--socket-mem" => {
                let v = value(&mut it)?;
                socket_mem(&v)?;
                out.extend([w.clone(), v]);
            }
            _ => {
                if let Some(v) = w.strip_prefix("--socket-mem=") {
                    socket_mem(v)?;
                } else if let Some(v) = w.strip_prefix("-m").filter(|v| !v.is_empty()) {
                    number(v, "-m", 1, MAX_MEMORY_MB)?;
                } else {
                    return Err(WordRefused::NotAllowed(w.clone()));
                }
                out.push(w.clone());
            }
        }
    }
    Ok(out)
}

/// testpmd's switches a controller may give, each with its range.
const TESTPMD: &[(&str, u64, u64)] = &[
    ("--mbcache", 0, 512),
    ("--rxd", 64, 32768),
    ("--txd", 64, 32768),
    ("--burst", 1, 512),
];

/// The testpmd words a controller may give, validated and returned as `--name=N`.
pub fn check_testpmd(words: &[String]) -> Result<Vec<String>, WordRefused> {
    let mut out = Vec::new();
    let mut it = words.iter();
    while let Some(w) = it.next() {
        let (name, inline) = match w.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (w.as_str(), None),
        };
        let Some(&(name, lo, hi)) = TESTPMD.iter().find(|t| t.0 == name) else {
            return Err(WordRefused::NotAllowed(w.clone()));
        };
        let v = match inline {
            Some(v) => v,
            None => it
                .next()
                .cloned()
                .ok_or_else(|| WordRefused::NeedsValue(name.to_string()))?,
        };
        let n = number(&v, name, lo, hi)?;
        out.push(format!("{name}={n}"));
    }
    Ok(out)
}

/// A device a controller named: the agent's own `--dpdk-dev`, a network PCI device of
/// this host (no devargs), or the vdev this host's inventory gives for one of its NICs
/// (MANA's `sonde host` line). Returned as `Device::parse` reads it.
pub fn check_device(asked: &str, agent: &AgentDpdk, root: &Path) -> Result<String, DeviceRefused> {
    let told = |why: NotOurs| DeviceRefused {
        asked: asked.to_string(),
        why,
    };
    let device = Device::parse(asked).map_err(|e| told(e.into()))?;
    if agent.device.as_ref() == Some(&device) {
        return Ok(device_word(&device));
    }
    let inv = inventory::collect(root);
    let listed = inv
        .nics
        .iter()
        .filter_map(|n| n.dpdk_vdev())
        .any(|v| Device::parse(&v).ok().as_ref() == Some(&device));
    if listed {
        return Ok(device_word(&device));
    }
    match &device {
        Device::Vdev(_) => Err(told(NotOurs::Virtual)),
        Device::Pci(s) if s.contains(',') => Err(told(NotOurs::DeviceArgs)),
        Device::Pci(addr) if is_network_device(root, addr, &inv) => Ok(addr.clone()),
        Device::Pci(_) => Err(told(NotOurs::NotNetwork)),
    }
}

/// A PCI address a NIC of the inventory sits at, or a network-class PCI device (one bound
/// to vfio-pci has no interface, so the inventory does not list it).
fn is_network_device(root: &Path, addr: &str, inv: &sonde_results::inventory::Inventory) -> bool {
    let full = if addr.matches(':').count() == 1 {
        format!("0000:{addr}")
    } else {
        addr.to_string()
    };
    if inv
        .nics
        .iter()
        .any(|n| n.bus_address.as_deref() == Some(full.as_str()))
    {
        return true;
    }
    if probe_dpdk::binding(root, &full) == probe_dpdk::Binding::Missing {
        return false;
    }
    let class = root.join("sys/bus/pci/devices").join(&full).join("class");
    std::fs::read_to_string(class).is_ok_and(|c| c.trim().starts_with("0x02"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn serve_flags_need_allow_dpdk_and_split_as_a_shell_would() {
        let a = AgentDpdk::from_flags(Some("--no-huge -- '--mbcache=512'"), None, true);
        let a = a.unwrap();
        assert_eq!((a.eal_args.len(), a.testpmd_args.len()), (1, 1));
        let e = AgentDpdk::from_flags(Some("--no-huge"), None, false).unwrap_err();
        assert!(e.to_string().contains("--allow dpdk"), "{e}");
        assert_eq!(e.flag(), "--dpdk-args");
        let e = AgentDpdk::from_flags(Some("'open"), None, true).unwrap_err();
        assert!(e.to_string().starts_with("--dpdk-args"), "{e}");
        assert_eq!(e.flag(), "--dpdk-args");
        let e = AgentDpdk::from_flags(None, Some("eth0"), true).unwrap_err();
        assert!(e.to_string().starts_with("--dpdk-dev: "), "{e}");
        assert_eq!(e.flag(), "--dpdk-dev");
        assert!(AgentDpdk::from_flags(None, None, false).is_ok());
    }

    #[test]
    fn each_harmless_switch_is_taken() {
        let eal = "--no-huge -m 512 -m1024 --socket-mem 1024,1024 --socket-mem=0,2048";
        assert_eq!(check_eal(&words(eal)).unwrap(), words(eal));
        let pmd = "--mbcache=512 --rxd 1024 --txd=4096 --burst=64";
        assert_eq!(
            check_testpmd(&words(pmd)).unwrap(),
            words("--mbcache=512 --rxd=1024 --txd=4096 --burst=64")
        );
    }

    #[test]
    fn anything_else_is_refused_naming_the_agent_flag() {
        for eal in [
            "-d /tmp/x/canary.so",
            "--vdev=net_pcap1,iface=lo,tx_pcap=/tmp/owned",
            "-a 0000:3b:00.0",
            "--file-prefix x",
            "--huge-dir /tmp",
            "--log-level=pmd,8",
            "--no-huge --trace=.*",
            "--plugin=/tmp/x.so",
        ] {
            let e = check_eal(&words(eal)).unwrap_err().to_string();
            assert!(e.contains("start the agent with --dpdk-args"), "{eal}: {e}");
        }
        for pmd in [
            "--cmdline-file=/etc/x",
            "--eth-peer=0,00:11:22:33:44:55",
            "-i",
        ] {
            let e = check_testpmd(&words(pmd)).unwrap_err().to_string();
            assert!(e.contains("start the agent with --dpdk-args"), "{pmd}: {e}");
        }
    }

    #[test]
    fn numbers_are_range_checked() {
        for eal in [
            "-m 0",
            "-m 99999999",
            "-m",
            "-m x",
            "--socket-mem 1,2,3,4,5,6,7,8,9",
        ] {
            assert!(check_eal(&words(eal)).is_err(), "{eal}");
        }
        assert!(check_eal(&words("--socket-mem=1024,/tmp")).is_err());
        for pmd in [
            "--mbcache=513",
            "--rxd=32",
            "--txd=99999",
            "--burst=0",
            "--burst",
        ] {
            assert!(check_testpmd(&words(pmd)).is_err(), "{pmd}");
        }
    }

    #[test]
    fn devices_are_the_agents_own_or_its_hosts() {
        let root = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../probe/tests/fixtures/azure-e192-mana"
        ));
        let agent = AgentDpdk::new(&[], Some("net_af_packet0,iface=eth1")).unwrap();
        assert_eq!(
            check_device("net_af_packet0,iface=eth1", &agent, root).unwrap(),
            "--vdev=net_af_packet0,iface=eth1"
        );
        for bad in [
            "--vdev=net_pcap1,rx_pcap=/etc/shadow,tx_pcap=/tmp/owned",
            "net_af_packet0,iface=eth0",
            "0000:3b:00.0",
            "7870:00:00.0,mac=7c:1e:52:0f:c6:95",
        ] {
            let e = check_device(bad, &agent, root).unwrap_err().to_string();
            assert!(e.contains("start the agent with --dpdk-dev"), "{bad}: {e}");
        }
        // MANA's vdev, exactly as this host's inventory gives it, is its own.
        let inv = inventory::collect(root);
        let mana = inv.nics.iter().find_map(|n| n.dpdk_vdev()).unwrap();
        assert!(check_device(&mana, &agent, root).is_ok(), "{mana}");
    }

    /// A pps spec whose client side asks `client` and server side `server` (EAL words,
    /// then testpmd's after a `--`).
    fn asking(client: &str, server: &str) -> TestSpec {
        let (client_eal_args, client_testpmd_args) = DpdkSpec::split_args(&words(client));
        let (server_eal_args, server_testpmd_args) = DpdkSpec::split_args(&words(server));
        TestSpec::Pps(sonde_results::PpsSpec {
            dpdk: Some(Box::new(DpdkSpec {
                client_eal_args,
                client_testpmd_args,
                server_eal_args,
                server_testpmd_args,
                ..DpdkSpec::default()
            })),
            ..sonde_results::PpsSpec::default()
        })
    }

    fn dpdk(spec: &TestSpec) -> &DpdkSpec {
        let TestSpec::Pps(p) = spec else { panic!() };
        p.dpdk.as_deref().unwrap()
    }

    #[test]
    fn a_remote_spec_gets_the_agents_arguments_last() {
        let agent = AgentDpdk::new(&words("-m 256 -- --mbcache=100"), None).unwrap();
        let mut spec = asking("--no-huge --no-pci -d /x.so", "--no-huge -- --burst 32");
        confine(&mut spec, Role::Server, Source::Remote(&agent)).unwrap();
        let d = dpdk(&spec);
        let server = (words("--no-huge -m 256"), words("--burst=32 --mbcache=100"));
        assert_eq!(d.args(Role::Server), (&server.0[..], &server.1[..]));
        // The controller's own switches are not this host's: dropped, never checked.
        assert_eq!(d.args(Role::Client), (&[][..], &[][..]));
        assert_eq!(d.server_device, None);
    }

    #[test]
    fn each_role_is_held_to_the_list_naming_its_flag() {
        let agent = AgentDpdk::default();
        // Serving: the server's switches are checked, named as the controller gave them.
        let mut spec = asking("--no-huge", "--no-huge --no-pci");
        let e = confine(&mut spec, Role::Server, Source::Remote(&agent)).unwrap_err();
        assert_eq!(e.flag, "--server-dpdk-args");
        assert!(
            e.reason.starts_with("\"--no-pci\" is not among"),
            "{}",
            e.reason
        );
        let mut spec = asking("", "-- --cmdline-file=/etc/x");
        let e = confine(&mut spec, Role::Server, Source::Remote(&agent)).unwrap_err();
        assert_eq!(e.flag, "--server-dpdk-args");
        // A client part (`--from A`): the client's switches, `--dpdk-args`.
        let mut spec = asking("--no-huge -d /x.so", "--no-huge");
        let e = confine(&mut spec, Role::Client, Source::Remote(&agent)).unwrap_err();
        assert_eq!(e.flag, "--dpdk-args");
        let mut spec = asking("--no-huge", "--no-pci -d /x.so");
        confine(&mut spec, Role::Client, Source::Remote(&agent)).unwrap();
        let client = words("--no-huge");
        assert_eq!(dpdk(&spec).args(Role::Client), (&client[..], &[][..]));
        assert_eq!(dpdk(&spec).args(Role::Server), (&[][..], &[][..]));
        // This host's own user: taken as given.
        let mut spec = asking("--no-pci", "");
        confine(&mut spec, Role::Client, Source::Local).unwrap();
        assert_eq!(dpdk(&spec).args(Role::Client).0, &words("--no-pci")[..]);
    }
}
