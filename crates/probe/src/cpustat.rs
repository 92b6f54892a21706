//! CPU time from /proc/stat. Counters are monotonic totals in USER_HZ ticks; usage over a
//! window is the delta of two snapshots, never a reset.

use std::path::Path;

use sonde_results::{CoreUsage, CpuBreakdown, CpuUsage};

use crate::{parse_err, read, FormatError, ProbeError};

/// Tick counters of one CPU line (`cpu` for the sum, `cpuN` for one CPU).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTimes {
    /// Guest time is already inside user/nice, so it is not added again.
    fn total(&self) -> u64 {
        self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
    }

    fn delta(&self, before: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user.saturating_sub(before.user),
            nice: self.nice.saturating_sub(before.nice),
            system: self.system.saturating_sub(before.system),
            idle: self.idle.saturating_sub(before.idle),
            iowait: self.iowait.saturating_sub(before.iowait),
            irq: self.irq.saturating_sub(before.irq),
            softirq: self.softirq.saturating_sub(before.softirq),
            steal: self.steal.saturating_sub(before.steal),
        }
    }

    /// These ticks' split; of a snapshot's own totals, since boot.
    pub fn breakdown(&self) -> CpuBreakdown {
        let t = self.total() as f64;
        let pct = |v: u64| if t > 0.0 { v as f64 * 100.0 / t } else { 0.0 };
        CpuBreakdown {
            user_percent: pct(self.user),
            nice_percent: pct(self.nice),
            system_percent: pct(self.system),
            iowait_percent: pct(self.iowait),
            irq_percent: pct(self.irq),
            softirq_percent: pct(self.softirq),
            steal_percent: pct(self.steal),
            idle_percent: if t > 0.0 { pct(self.idle) } else { 100.0 },
        }
    }
}

/// One reading of /proc/stat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuSnapshot {
    pub total: CpuTimes,
    /// (cpu number, times), in file order; offline CPUs are absent.
    pub per_cpu: Vec<(usize, CpuTimes)>,
}

pub fn read_snapshot(root: &Path) -> Result<CpuSnapshot, ProbeError> {
    let text = read(root, "proc/stat")?;
    parse(&text).map_err(|r| parse_err(root, "proc/stat", r))
}

pub fn parse(text: &str) -> Result<CpuSnapshot, FormatError> {
    let mut total = None;
    let mut per_cpu = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("cpu")) {
        let mut fields = line.split_ascii_whitespace();
        let name = fields.next().unwrap_or_default();
        let nums: Vec<u64> = fields
            .map(|f| f.parse::<u64>().map_err(|e| FormatError::field(name, e)))
            .collect::<Result<_, _>>()?;
        if nums.len() < 4 {
            let reason = format!("{} fields, need at least 4", nums.len());
            return Err(FormatError::field(name, reason));
        }
        let at = |i: usize| nums.get(i).copied().unwrap_or(0);
        let times = CpuTimes {
            user: at(0),
            nice: at(1),
            system: at(2),
            idle: at(3),
            iowait: at(4),
            irq: at(5),
            softirq: at(6),
            steal: at(7),
        };
        match &name[3..] {
            "" => total = Some(times),
            n => {
                let cpu = n
                    .parse()
                    .map_err(|_| FormatError::missing(format!("bad cpu line name {name}")))?;
                per_cpu.push((cpu, times));
            }
        }
    }
    let total = total.ok_or_else(|| FormatError::missing("no aggregate cpu line"))?;
    Ok(CpuSnapshot { total, per_cpu })
}

/// Each CPU's busy percent between two snapshots, by CPU number.
pub fn per_cpu_busy(before: &CpuSnapshot, after: &CpuSnapshot) -> Vec<(usize, f64)> {
    after
        .per_cpu
        .iter()
        .filter_map(|(cpu, t)| {
            let (_, b) = before.per_cpu.iter().find(|(c, _)| c == cpu)?;
            Some((*cpu, t.delta(b).breakdown().busy_percent()))
        })
        .collect()
}

/// The time split of each CPU of `cpus` (each once, in order) between two snapshots.
pub fn cores(before: &CpuSnapshot, after: &CpuSnapshot, cpus: &[usize]) -> Vec<CoreUsage> {
    let mut wanted = cpus.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    wanted
        .into_iter()
        .filter_map(|cpu| {
            let (_, a) = after.per_cpu.iter().find(|(c, _)| *c == cpu)?;
            let (_, b) = before.per_cpu.iter().find(|(c, _)| *c == cpu)?;
            Some(CoreUsage {
                cpu,
                time: a.delta(b).breakdown(),
            })
        })
        .collect()
}

/// Host CPU use between two snapshots: the whole host and its busiest CPU.
pub fn usage(before: &CpuSnapshot, after: &CpuSnapshot) -> CpuUsage {
    let host = after.total.delta(&before.total).breakdown();
    let mut busiest = (
        0,
        CpuBreakdown {
            idle_percent: 100.0,
            ..Default::default()
        },
    );
    for (cpu, t) in &after.per_cpu {
        if let Some((_, b)) = before.per_cpu.iter().find(|(c, _)| c == cpu) {
            let d = t.delta(b).breakdown();
            if d.busy_percent() > busiest.1.busy_percent() {
                busiest = (*cpu, d);
            }
        }
    }
    CpuUsage {
        cpus: after.per_cpu.len(),
        host,
        busiest_cpu: busiest.0,
        busiest: busiest.1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn parses_captured_vm() {
        let s = read_snapshot(&fixture("vm-2cpu-virtio")).unwrap();
        assert_eq!(s.per_cpu.len(), 2);
        assert_eq!(s.total.user, 1145);
        assert_eq!(s.total.idle, 50123);
        assert_eq!(
            s.per_cpu[1],
            (
                1,
                CpuTimes {
                    user: 844,
                    nice: 0,
                    system: 540,
                    idle: 24529,
                    iowait: 231,
                    irq: 0,
                    softirq: 8,
                    steal: 6
                }
            )
        );
    }

    #[test]
    fn usage_of_known_delta() {
        let before = parse("cpu 0 0 0 0 0 0 0 0\ncpu0 0 0 0 0\ncpu1 0 0 0 0\n").unwrap();
        let after = parse(
            "cpu 100 0 50 150 0 0 100 0\ncpu0 0 0 0 100 0 0 0 0\ncpu1 100 0 50 50 0 0 100 0\n",
        )
        .unwrap();
        let u = usage(&before, &after);
        assert_eq!(u.cpus, 2);
        assert_eq!(u.host.user_percent, 25.0);
        assert_eq!(u.host.softirq_percent, 25.0);
        assert_eq!(u.host.idle_percent, 37.5);
        assert_eq!(u.busiest_cpu, 1);
        assert_eq!(u.busiest.busy_percent(), 250.0 / 3.0);
    }

    #[test]
    fn steal_is_busy_time_and_its_own_share() {
        let before = parse("cpu 0 0 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0\n").unwrap();
        let after = parse("cpu 60 0 0 20 0 0 0 20\ncpu0 60 0 0 20 0 0 0 20\n").unwrap();
        let u = usage(&before, &after);
        assert_eq!(u.host.steal_percent, 20.0);
        assert_eq!(u.host.busy_percent(), 80.0);
        assert_eq!(u.busiest.steal_named(), Some(20.0));
    }

    #[test]
    fn cores_of_the_pinned_cpus() {
        let before = parse("cpu 0 0 0 0 0 0 0 0\ncpu0 0 0 0 0\ncpu1 0 0 0 0\n").unwrap();
        let after =
            parse("cpu 0 0 0 0 0 0 0 0\ncpu0 0 0 0 100\ncpu1 30 0 0 10 0 0 60 0\n").unwrap();
        let c = cores(&before, &after, &[1, 1, 7]);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].cpu, 1);
        assert_eq!(c[0].time.softirq_percent, 60.0);
        assert_eq!(c[0].time.busy_percent(), 90.0);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse("cpu a b c d\n").is_err());
        assert!(parse("intr 1 2 3\n").is_err());
        assert!(parse("cpu 1 2\n").is_err());
    }
}
