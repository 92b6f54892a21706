//! CPU topology from sysfs: which logical CPUs share a physical core, and which CPUs this
//! process may run on (its inherited affinity mask: taskset, cgroups).

use std::collections::BTreeSet;
use std::path::Path;

pub use crate::cpu_list::{parse_cpu_list, CpuListError};
use crate::{parse_err, read, ProbeError};

/// Online CPUs (from `devices/system/cpu/online`).
pub fn online_cpus(root: &Path) -> Result<Vec<usize>, ProbeError> {
    let rel = "sys/devices/system/cpu/online";
    parse_cpu_list(&read(root, rel)?).map_err(|r| parse_err(root, rel, r))
}

/// Identity of the physical core a CPU belongs to: (package, core).
pub fn core_of(root: &Path, cpu: usize) -> Result<(u32, u32), ProbeError> {
    let get = |name: &str| -> Result<u32, ProbeError> {
        let rel = format!("sys/devices/system/cpu/cpu{cpu}/topology/{name}");
        read(root, &rel)?
            .trim()
            .parse()
            .map_err(|e| parse_err(root, &rel, e))
    };
    Ok((get("physical_package_id")?, get("core_id")?))
}

/// One CPU per physical core among `allowed`, lowest-numbered first: where to put one
/// worker per core without doubling up on SMT siblings.
pub fn one_cpu_per_core(root: &Path, allowed: &[usize]) -> Result<Vec<usize>, ProbeError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for &cpu in allowed {
        if seen.insert(core_of(root, cpu)?) {
            out.push(cpu);
        }
    }
    Ok(out)
}

/// CPUs the calling thread may run on (sched_getaffinity).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list("5").unwrap(), vec![5]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert!(parse_cpu_list("").is_err());
    }

    #[test]
    fn captured_vm_has_two_cores() {
        let root = fixture("vm-2cpu-virtio");
        let online = online_cpus(&root).unwrap();
        assert_eq!(online, vec![0, 1]);
        assert_eq!(one_cpu_per_core(&root, &online).unwrap(), vec![0, 1]);
    }

    #[test]
    fn smt_siblings_collapse_to_one_cpu() {
        let root = fixture("smt-4cpu");
        let online = online_cpus(&root).unwrap();
        assert_eq!(online, vec![0, 1, 2, 3]);
        // cpu0/cpu2 and cpu1/cpu3 are siblings.
        assert_eq!(one_cpu_per_core(&root, &online).unwrap(), vec![0, 1]);
        assert_eq!(one_cpu_per_core(&root, &[2, 3]).unwrap(), vec![2, 3]);
    }

    #[test]
    fn allowed_is_not_empty() {
        assert!(!allowed_cpus().is_empty());
    }
}
