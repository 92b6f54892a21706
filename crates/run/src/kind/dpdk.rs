//! What the DPDK engine needs of a host, checked on each side before its testpmd starts
//! (root, testpmd, a device DPDK can drive, enough hugepages), and the testpmd plan built
//! from the host inventory: one forwarding lcore per physical core of the NIC's NUMA node
//! (sibling threads left out, as the published reports list them by hand), a main lcore
//! apart, queues from `--tx-queues/--rx-queues`.

use std::ffi::OsString;
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;

use super::host::root;

use sonde_engine::dpdk::{self, Device, Forwarding, Memory, Plan};
use sonde_probe::dpdk::{binding, hugepages, Binding};
use sonde_probe::{host, inventory, placement, topology};
use sonde_results::{Engine, PpsSpec, Role};

/// How long testpmd may take from exec to its first prompt (EAL, port set-up): under the
/// protocol's 10 s from `Setup` to `Ready`.
pub const READY_WITHIN: std::time::Duration = std::time::Duration::from_secs(8);

pub fn refuse(reason: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("--engine {}: {reason}", Engine::Dpdk),
    )
}

/// How one side's testpmd runs, before its forwarding mode is known.
pub struct Setup {
    pub program: PathBuf,
    pub device: Device,
    pub memory: Memory,
    pub main_cpu: usize,
    pub cpus: Vec<usize>,
    pub queues: u32,
    pub notes: Vec<String>,
}

/// Checks this host for `role`'s testpmd and decides how it runs; `local` is the address
/// the test's traffic uses here, `cpus` the forwarding CPUs placement chose (if any) for
/// `workers` forwarding lcores.
pub fn setup(
    spec: &PpsSpec,
    role: Role,
    local: IpAddr,
    cpus: Option<&[usize]>,
    workers: usize,
) -> io::Result<Setup> {
    let d = spec
        .dpdk
        .as_ref()
        .ok_or_else(|| refuse("the spec has no dpdk part".into()))?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(refuse(
            "testpmd needs root (hugepages, the device, packet sockets): run sonde as root".into(),
        ));
    }
    let program = testpmd_program()?;
    let mut notes = Vec::new();
    let asked = role.pick(&d.client_device, &d.server_device);
    let device = match asked {
        Some(s) => explicit_device(s, role)?,
        None => default_device(local, &mut notes)?,
    };
    let (main_cpu, cpus) = lcores(role, cpus, workers);
    let queues = d.queues(role, cpus.len() as u32);
    let device = with_queue_pairs(device, queues);
    let memory = if d.without_hugepages(role) {
        notes.push("testpmd ran without hugepages (--no-huge): slower than with them".into());
        Memory::Plain
    } else {
        Memory::Huge
    };
    let setup = Setup {
        program,
        device,
        memory,
        main_cpu,
        cpus,
        queues,
        notes,
    };
    if memory == Memory::Huge {
        check_hugepages(&setup.plan(spec, Forwarding::RxOnly, role), role)?;
    }
    Ok(setup)
}

impl Setup {
    /// The command line of this side's testpmd.
    pub fn plan(&self, spec: &PpsSpec, forwarding: Forwarding, role: Role) -> Plan {
        let d = spec.dpdk.as_deref().cloned().unwrap_or_default();
        let (eal, testpmd) = d.args(role);
        Plan {
            program: self.program.clone(),
            device: self.device.clone(),
            main_cpu: self.main_cpu,
            cpus: self.cpus.clone(),
            queues: self.queues,
            descriptors: d.descriptors,
            burst: spec.batch,
            memory: self.memory,
            file_prefix: dpdk::file_prefix(role.as_str()),
            forwarding,
            eal_extra: eal.iter().filter(|a| *a != "--no-huge").cloned().collect(),
            testpmd_extra: testpmd.to_vec(),
        }
    }
}

/// dpdk-testpmd (or testpmd) from PATH.
fn testpmd_program() -> io::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    dpdk::find_testpmd(&path).ok_or_else(|| {
        refuse(format!(
            "{} not found in PATH: install it (Debian and Ubuntu: apt-get install dpdk-dev) or add its directory to PATH",
            dpdk::PROGRAMS.join(" or ")
        ))
    })
}

/// `--dpdk-dev` (`--server-dpdk-dev`) as given; a PCI device must be bound to a driver
/// DPDK can use.
fn explicit_device(s: &str, role: Role) -> io::Result<Device> {
    let flag = role.pick("--dpdk-dev", "--server-dpdk-dev");
    let device = Device::parse(s).map_err(|e| refuse(format!("{flag}: {e}")))?;
    let Some(addr) = device.pci_address() else {
        return Ok(device);
    };
    match binding(root(), addr) {
        Binding::UserSpace(_) | Binding::Bifurcated(_) => Ok(device),
        Binding::Kernel(driver) => Err(refuse(format!(
            "{flag} {addr} is bound to the kernel driver {driver}: bind it to vfio-pci (dpdk-devbind.py -b vfio-pci {addr}; the kernel loses the interface) or name a device the kernel keeps, such as net_af_packet0,iface=IF"
        ))),
        Binding::Unbound => Err(refuse(format!(
            "{flag} {addr} is bound to no driver: bind it to vfio-pci (dpdk-devbind.py -b vfio-pci {addr})"
        ))),
        Binding::Missing => Err(refuse(format!(
            "{flag} {addr}: no such PCI device on this host (lspci lists them)"
        ))),
    }
}

/// The device behind the interface holding `local`: MANA's vdev, a bifurcated NIC's PCI
/// address, or (for a virtual interface) testpmd on the kernel's packet sockets.
fn default_device(local: IpAddr, notes: &mut Vec<String>) -> io::Result<Device> {
    let iface =
        host::interface_with(local).ok_or_else(|| refuse(format!("no interface holds {local}")))?;
    if iface == "lo" {
        return Err(refuse(format!(
            "{local} is on loopback: testpmd needs a network device"
        )));
    }
    let inv = inventory::collect(root());
    let nic = inv.nics.iter().find(|n| n.name == iface);
    if let Some(vdev) = nic.and_then(|n| n.dpdk_vdev()) {
        return Device::parse(&vdev).map_err(|e| refuse(e.to_string()));
    }
    match nic.and_then(|n| n.bus_address.clone()) {
        Some(bus) if bus.contains(':') => {
            let dev = Device::Pci(bus.clone());
            match binding(root(), &bus) {
                Binding::Bifurcated(_) | Binding::UserSpace(_) => Ok(dev),
                b => Err(refuse(format!(
                    "{iface} ({bus}) is bound to the kernel ({b:?}): bind it to vfio-pci (dpdk-devbind.py -b vfio-pci {bus}; the kernel loses the interface) and name it with --dpdk-dev {bus}, or run testpmd through the kernel with --dpdk-dev net_af_packet0,iface={iface}"
                ))),
            }
        }
        _ => {
            notes.push(format!(
                "testpmd ran on {iface} through the kernel's packet sockets (net_af_packet): {iface} is a virtual interface, there is no device to bypass the kernel to"
            ));
            Ok(Device::Vdev(format!("net_af_packet0,iface={iface}")))
        }
    }
}

/// Frames in each net_af_packet ring: DPDK's default of 512 dropped 0.01-0.1 % of a
/// veth's packets on 2 vCPUs when the receiving lcore was descheduled; 4096 dropped none.
const AF_PACKET_FRAMES: u32 = 4096;

/// sonde's net_af_packet gets the side's queue count (`qpairs`) and deeper rings.
fn with_queue_pairs(device: Device, queues: u32) -> Device {
    match device {
        Device::Vdev(mut v) if v.starts_with("net_af_packet") => {
            if !v.contains("qpairs=") {
                v.push_str(&format!(",qpairs={queues}"));
            }
            if !v.contains("framecnt=") {
                v.push_str(&format!(",framecnt={AF_PACKET_FRAMES}"));
            }
            Device::Vdev(v)
        }
        d => d,
    }
}

/// The forwarding CPUs (placement's, or one per physical core of the NIC's node) and a
/// main CPU apart from them when the host has one to spare.
fn lcores(role: Role, chosen: Option<&[usize]>, workers: usize) -> (usize, Vec<usize>) {
    let allowed = topology::allowed_cpus();
    let cpus = match chosen {
        Some(c) if !c.is_empty() => c.to_vec(),
        _ => {
            let inv = inventory::collect(root());
            let end = role.pick(placement::Pick::First, placement::Pick::Last);
            placement::choose(&inv, &allowed, workers, end)
                .unwrap_or_else(|| allowed.iter().copied().take(workers.max(1)).collect())
        }
    };
    let spare = allowed.iter().copied().find(|c| !cpus.contains(c));
    (spare.unwrap_or(cpus[0]), cpus)
}

/// Refuses when the host has fewer free hugepages than `plan` needs, with the count and
/// the flag that gives `role`'s testpmd ordinary pages.
fn check_hugepages(plan: &Plan, role: Role) -> io::Result<()> {
    let h = hugepages(root()).map_err(|e| refuse(e.to_string()))?;
    let need = plan.memory_bytes().div_ceil(h.page_bytes.max(1));
    if h.free >= need {
        return Ok(());
    }
    Err(refuse(format!(
        "testpmd needs {need} free hugepages of {} MiB and this host has {} free (of {}): reserve them (echo {} > /proc/sys/vm/nr_hugepages) or run without them, slower, with {}=--no-huge",
        h.page_bytes >> 20,
        h.free,
        h.total,
        h.total + need - h.free,
        role.pick("--dpdk-args", "--server-dpdk-args"),
    )))
}
