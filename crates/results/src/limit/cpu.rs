//! How close a side's CPU came to its limit: the evidence every kind's rules share.

use crate::document::{CpuFigures, Document, MeasuredBy, OneHost};
use crate::side::{CpuBreakdown, Role};
use crate::verdict::{Evidence, TransferEnd};

/// A core this busy over a window has no time left: /proc/stat's tick accounting and the
/// gaps between a wake-up and the next packet leave a few percent idle even on a core
/// that never waited for work.
pub const CPU_SATURATED_PERCENT: f64 = 95.0;

/// Below this a core was idle a fifth of the time or more, waiting for work: whatever
/// limited the run, it was not this CPU. Between the two, saturation rises linearly.
pub const CPU_BUSY_FLOOR_PERCENT: f64 = 80.0;

/// A busy worker core is the side's own work when its workers (and the kernel's softirq
/// and interrupt time there, its traffic's) filled at least this share of the window.
pub const WORKERS_OWN_PERCENT: f64 = 50.0;

/// A busy worker core starved the side when its workers waited runnable this share of the
/// window or more. A worker that keeps up with its traffic and shares the core with a busy
/// process waits only from each wake-up to its turn (CFS lets a woken thread in almost at
/// once: 0.3 % of the window under a nice 0 hog beside a 100 Mbit/s stream); a worker
/// that wants the core all the time beside two busy loops waits two thirds of it.
pub const WORKERS_STARVED_PERCENT: f64 = 10.0;

/// `, the hypervisor's steal N %` where `t` named it ([`CpuBreakdown::steal_named`]).
fn steal(t: &CpuBreakdown) -> String {
    t.steal_named().map_or_else(String::new, |s| {
        format!(", the hypervisor's steal {s:.0} %")
    })
}

/// The hypervisor's steal on a side, where named: the most of its workers' pinned cores,
/// else its host's; the figure and percent. A stolen vCPU's waits land in whatever that
/// host was doing: a round trip's stages there, its wake-ups most.
pub(super) fn steal_named(cpu: &CpuFigures) -> Option<(&'static str, f64)> {
    let pinned = cpu.worker_cpus.iter().filter_map(|c| c.time.steal_named());
    match pinned.max_by(f64::total_cmp) {
        Some(s) => Some(("cpu.worker_cpus.steal_percent", s)),
        None => cpu
            .usage
            .as_ref()
            .and_then(|u| u.host.steal_named())
            .map(|s| ("cpu.host.steal_percent", s)),
    }
}

/// A side's CPU: how saturated (0 to 1) and the figure that says so.
pub(super) struct Saturation {
    pub level: f64,
    /// The busiest figure, percent.
    pub busy_percent: f64,
    pub evidence: Evidence,
}

/// 0 at [`CPU_BUSY_FLOOR_PERCENT`], 1 at [`CPU_SATURATED_PERCENT`] and above.
pub(super) fn level(busy_percent: f64) -> f64 {
    ((busy_percent - CPU_BUSY_FLOOR_PERCENT) / (CPU_SATURATED_PERCENT - CPU_BUSY_FLOOR_PERCENT))
        .clamp(0.0, 1.0)
}

/// One end of a run, as its CPU evidence names it.
#[derive(Clone, Copy)]
pub(super) struct Side<'a> {
    pub end: TransferEnd,
    /// How the evidence calls the side ("sender", "client").
    pub name: &'a str,
    pub by: &'a MeasuredBy,
    pub cpu: &'a CpuFigures,
    pub seconds: f64,
    /// The workers busy-poll.
    pub spins: bool,
}

/// Both ends' CPUs: each side's own, and where both ran on one host, that host's CPUs
/// shared between them (each end's part in proportion to the CPU time its workers used),
/// whichever is the stronger.
pub(super) fn both(
    doc: &Document,
    sender: Option<Side<'_>>,
    receiver: Option<Side<'_>>,
) -> (Option<Saturation>, Option<Saturation>) {
    let host_cpus = |by: &MeasuredBy| {
        let host = match by.measured_by {
            Role::Client => Some(&doc.start.client),
            Role::Server => doc.start.server.as_ref(),
        };
        host.and_then(|h| h.cpus_online)
    };
    let own = |s: &Option<Side<'_>>| s.as_ref().and_then(|s| saturation(s, host_cpus(s.by)));
    let (mut a, mut b) = (own(&sender), own(&receiver));
    if let (Some(host), Some(s), Some(r)) = (&doc.end.one_host, &sender, &receiver) {
        if let Some((x, y)) = shared(host, s, r) {
            a = stronger(a, Some(x));
            b = stronger(b, Some(y));
        }
    }
    (a, b)
}

fn stronger(a: Option<Saturation>, b: Option<Saturation>) -> Option<Saturation> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.level > a.level { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The one host's CPUs, saturated or not, as each end's: the end whose workers used more
/// CPU time takes the host's whole level, the other its proportion of it.
fn shared(host: &OneHost, s: &Side<'_>, r: &Side<'_>) -> Option<(Saturation, Saturation)> {
    let usage = host.cpu.as_ref()?;
    let (cs, cr) = (s.cpu.process_cpu_s?, r.cpu.process_cpu_s?);
    let most = cs.max(cr);
    if s.spins || r.spins || most <= 0.0 {
        return None;
    }
    let h = &usage.host;
    let kernel = h.softirq_percent + h.irq_percent;
    if others_work(s.cpu, r.cpu, usage.cpus, kernel) {
        return None;
    }
    let busy = h.busy_percent();
    let text = format!(
        "both ends on one host ({}): its {} CPUs {busy:.0} % busy{}; the {}'s workers used {cs:.2} s of CPU, the {}'s {cr:.2} s",
        host.hostname,
        usage.cpus,
        steal(h),
        s.name,
        r.name
    );
    let one = |side: &Side<'_>, used: f64| Saturation {
        level: level(busy) * used / most,
        busy_percent: busy,
        evidence: ev(side.end, side.by, "one_host.cpu.host", busy, text.clone()),
    };
    Some((one(s, cs), one(r, cr)))
}

/// The one host's CPUs were busy with other processes' work: both ends' pinned workers
/// were counted, none waited to run [`WORKERS_STARVED_PERCENT`] of the window, and
/// together with the host's softirq they filled less than [`WORKERS_OWN_PERCENT`] of its
/// `cpus` CPUs. A compiler beside a shaped test kept a 2-CPU host 100 % busy while both
/// ends' workers used 0.01 s of CPU each.
fn others_work(s: &CpuFigures, r: &CpuFigures, cpus: usize, kernel: f64) -> bool {
    let sum = |c: &CpuFigures, f: fn(&crate::side::WorkerSched) -> f64| {
        c.workers.iter().map(f).sum::<f64>()
    };
    let counted = !s.workers.is_empty() && !r.workers.is_empty();
    let starved = [s, r]
        .iter()
        .any(|c| sum(c, |w| w.waited_percent) >= WORKERS_STARVED_PERCENT);
    let on = sum(s, |w| w.on_cpu_percent) + sum(r, |w| w.on_cpu_percent);
    counted && !starved && on / cpus.max(1) as f64 + kernel < WORKERS_OWN_PERCENT
}

/// The side's CPU, from the busiest of: the cores its workers were pinned to (which also
/// shows a competing process or the kernel's softirq work on them), its worker threads'
/// own share of their time, and, unpinned, the host's busiest core. A busy pinned core whose
/// workers neither filled it (with the kernel's softirq there) nor waited to run on it was
/// kept busy by other processes while the workers slept: it counts only the workers' own
/// share. `spins`: the workers
/// busy-poll, so their threads and cores are busy whatever limits the run, and only a
/// core's softirq and interrupt time tells.
pub(super) fn saturation(side: &Side<'_>, host_cpus: Option<usize>) -> Option<Saturation> {
    let Side {
        end,
        name,
        by,
        cpu,
        seconds,
        spins,
    } = *side;
    let mut found: Vec<(f64, Evidence)> = Vec::new();
    for core in &cpu.worker_cpus {
        let t = &core.time;
        let kernel = t.softirq_percent + t.irq_percent;
        let busy = if spins { kernel } else { t.busy_percent() };
        let mut text = format!(
            "{name} CPU {} busy {busy:.0} % (softirq {:.0} %, system {:.0} %, user {:.0} %{})",
            core.cpu,
            t.softirq_percent,
            t.system_percent,
            t.user_percent,
            steal(t)
        );
        if let Some((on, waited)) = workers_on(cpu, core.cpu).filter(|_| !spins) {
            let own = (on + kernel).min(busy);
            let ran = format!("the {name}'s workers ran {on:.0} % and waited {waited:.1} %");
            if own < WORKERS_OWN_PERCENT && waited < WORKERS_STARVED_PERCENT {
                // Others' work beside workers that kept up: not this side's limit. The
                // hypervisor's, where its steal was most of what the workers did not fill.
                let others = match t.steal_percent * 2.0 > busy - own {
                    true => "the hypervisor's",
                    false => "other processes",
                };
                let text = format!(
                    "{name} CPU {} busy {busy:.0} %, mostly {others}; {ran} (softirq {:.0} %{})",
                    core.cpu,
                    t.softirq_percent,
                    steal(t)
                );
                found.push((own, ev(end, by, "cpu.workers.on_cpu_percent", own, text)));
                continue;
            }
            text = format!("{text}; {ran}");
        }
        let figure = "cpu.worker_cpus.busy_percent";
        found.push((busy, ev(end, by, figure, busy, text)));
    }
    if let (Some(p), false) = (cpu.process_cpu_s, spins) {
        // Threads pinned to fewer CPUs than there are threads, or on a host with fewer,
        // can use only those.
        let cores = match &by.pinned_cpus {
            Some(pins) => pins.iter().collect::<std::collections::BTreeSet<_>>().len(),
            None => (by.threads as usize).min(host_cpus.unwrap_or(usize::MAX)),
        };
        if seconds > 0.0 && cores > 0 {
            let share = (p / seconds / cores as f64 * 100.0).min(100.0);
            let text = format!(
                "{name} workers busy {share:.0} % of their {cores} CPU{} ({p:.2} s of CPU in {seconds:.2} s)",
                if cores == 1 { "" } else { "s" }
            );
            found.push((share, ev(end, by, "cpu.process_cpu_s", share, text)));
        }
    }
    if let (Some(u), true) = (&cpu.usage, cpu.worker_cpus.is_empty()) {
        let b = &u.busiest;
        let busy = if spins {
            b.softirq_percent + b.irq_percent
        } else {
            b.busy_percent()
        };
        let text = format!(
            "{name} host's busiest CPU {} busy {busy:.0} % (softirq {:.0} %{})",
            u.busiest_cpu,
            b.softirq_percent,
            steal(b)
        );
        found.push((busy, ev(end, by, "cpu.busiest", busy, text)));
    }
    let (busy, evidence) = found.into_iter().max_by(|a, b| a.0.total_cmp(&b.0))?;
    Some(Saturation {
        level: level(busy),
        busy_percent: busy,
        evidence,
    })
}

/// The workers pinned to `core`: their summed share of the window on CPU and waiting to
/// run; `None` where none was counted (an older document, or not one found).
fn workers_on(cpu: &CpuFigures, core: usize) -> Option<(f64, f64)> {
    let on = cpu.workers.iter().filter(|w| w.cpu == core);
    on.fold(None, |sum, w| {
        let (a, b) = sum.unwrap_or((0.0, 0.0));
        Some((a + w.on_cpu_percent, b + w.waited_percent))
    })
}

fn ev(end: TransferEnd, by: &MeasuredBy, figure: &str, value: f64, text: String) -> Evidence {
    Evidence::new(end, Some(by.measured_by), figure, value, "%", text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::side::CoreUsage;

    fn by(threads: u32) -> MeasuredBy {
        MeasuredBy {
            measured_by: Role::Server,
            host: "h".into(),
            engine: None,
            threads,
            pinned_cpus: Some(vec![1]),
            bypass: None,
            cpu_latency: None,
            stamps: None,
        }
    }

    fn side<'a>(by: &'a MeasuredBy, cpu: &'a CpuFigures, spins: bool) -> Side<'a> {
        Side {
            end: TransferEnd::Receiver,
            name: "receiver",
            by,
            cpu,
            seconds: 4.0,
            spins,
        }
    }

    fn core(cpu: usize, idle: f64, softirq: f64) -> CoreUsage {
        CoreUsage {
            cpu,
            time: CpuBreakdown {
                idle_percent: idle,
                softirq_percent: softirq,
                user_percent: 100.0 - idle - softirq,
                ..Default::default()
            },
        }
    }

    #[test]
    fn a_hogged_core_shows_though_the_thread_got_half_of_it() {
        let cpu = CpuFigures {
            usage: None,
            process_cpu_s: Some(2.0),
            worker_cpus: vec![core(1, 1.0, 10.0)],
            workers: Vec::new(),
        };
        let s = saturation(&side(&by(1), &cpu, false), None).unwrap();
        assert_eq!(s.evidence.value, 99.0);
        assert_eq!(s.level, 1.0);
        assert!(s.evidence.text.starts_with("receiver CPU 1 busy 99 %"));
        assert_eq!(s.evidence.measured_by, Some(Role::Server));
    }

    #[test]
    fn spinning_counts_only_the_kernels_share() {
        let cpu = CpuFigures {
            usage: None,
            process_cpu_s: Some(4.0),
            worker_cpus: vec![core(1, 0.0, 20.0)],
            workers: vec![sched(1, 80.0, 0.0)],
        };
        let s = saturation(&side(&by(1), &cpu, true), None).unwrap();
        assert_eq!((s.evidence.value, s.level), (20.0, 0.0));
    }

    fn sched(cpu: usize, on: f64, waited: f64) -> crate::side::WorkerSched {
        crate::side::WorkerSched {
            cpu,
            on_cpu_percent: on,
            waited_percent: waited,
        }
    }

    /// A core 100 % busy whose two workers ran `on` % each and waited `waited` % each,
    /// with 1 % softirq.
    fn busy_core(on: f64, waited: f64) -> Saturation {
        let cpu = CpuFigures {
            usage: None,
            process_cpu_s: Some(2.0 * on / 100.0 * 4.0),
            worker_cpus: vec![core(1, 0.0, 1.0), core(2, 95.0, 1.0)],
            workers: vec![
                sched(1, on, waited),
                sched(1, on, waited),
                sched(2, 4.0, 0.0),
            ],
        };
        let mut b = by(2);
        b.pinned_cpus = Some(vec![1, 1]);
        saturation(&side(&b, &cpu, false), None).unwrap()
    }

    #[test]
    fn a_core_busy_with_others_work_while_the_workers_slept_is_not_the_sides() {
        let s = busy_core(4.0, 0.15);
        assert_eq!(s.level, 0.0);
        assert_eq!(s.evidence.figure, "cpu.workers.on_cpu_percent");
        assert_eq!(
            s.evidence.value, 9.0,
            "both workers' 8 % and the softirq's 1 %"
        );
        assert_eq!(
            s.evidence.text,
            "receiver CPU 1 busy 100 %, mostly other processes; the receiver's workers ran 8 % and waited 0.3 % (softirq 1 %)"
        );
    }

    #[test]
    fn a_core_the_workers_waited_on_starved_them() {
        // Each worker ran a sixth and waited a third: a hog took the rest.
        let s = busy_core(16.0, 34.0);
        assert_eq!((s.level, s.evidence.value), (1.0, 100.0));
        assert_eq!(s.evidence.figure, "cpu.worker_cpus.busy_percent");
        assert!(
            s.evidence
                .text
                .ends_with("; the receiver's workers ran 32 % and waited 68.0 %"),
            "{}",
            s.evidence.text
        );
        // Just under the starved share, and under the own share, it is others' work.
        assert_eq!(busy_core(24.0, 4.9).level, 0.0);
        assert_eq!(busy_core(24.0, 5.0).level, 1.0);
    }

    #[test]
    fn a_core_the_workers_filled_is_the_sides_own_work() {
        assert_eq!(busy_core(24.5, 0.0).level, 1.0, "49 % + 1 % softirq");
        assert_eq!(busy_core(24.0, 0.0).level, 0.0);
    }

    /// [`core`] with `steal` % of it taken from its user time.
    fn stolen(cpu: usize, idle: f64, softirq: f64, steal: f64) -> CoreUsage {
        let mut c = core(cpu, idle, softirq);
        c.time.user_percent -= steal;
        c.time.steal_percent = steal;
        c
    }

    #[test]
    fn the_hypervisors_steal_is_busy_time_and_named_from_one_percent() {
        let with = |steal: f64| CpuFigures {
            usage: None,
            process_cpu_s: Some(2.0),
            worker_cpus: vec![stolen(1, 1.0, 10.0, steal)],
            workers: Vec::new(),
        };
        let cpu = with(30.0);
        let s = saturation(&side(&by(1), &cpu, false), None).unwrap();
        assert_eq!((s.evidence.value, s.level), (99.0, 1.0));
        assert_eq!(
            s.evidence.text,
            "receiver CPU 1 busy 99 % (softirq 10 %, system 0 %, user 59 %, the hypervisor's steal 30 %)"
        );
        let cpu = with(0.9);
        let s = saturation(&side(&by(1), &cpu, false), None).unwrap();
        assert!(!s.evidence.text.contains("steal"), "{}", s.evidence.text);
    }

    #[test]
    fn a_core_the_hypervisor_took_while_the_workers_slept_is_named_so() {
        let on_core = |steal: f64| {
            let cpu = CpuFigures {
                usage: None,
                process_cpu_s: Some(0.32),
                worker_cpus: vec![stolen(1, 0.0, 1.0, steal)],
                workers: vec![sched(1, 4.0, 0.15), sched(1, 4.0, 0.15)],
            };
            saturation(&side(&by(2), &cpu, false), None).unwrap()
        };
        // 91 % not the workers' (100 - 8 - 1): the hypervisor's when steal is most of it.
        let s = on_core(46.0);
        assert_eq!(s.level, 0.0);
        assert_eq!(
            s.evidence.text,
            "receiver CPU 1 busy 100 %, mostly the hypervisor's; the receiver's workers ran 8 % and waited 0.3 % (softirq 1 %, the hypervisor's steal 46 %)"
        );
        assert!(on_core(45.0)
            .evidence
            .text
            .contains("mostly other processes; "));
    }

    #[test]
    fn levels() {
        assert_eq!(level(75.0), 0.0);
        assert_eq!(level(87.5), 0.5);
        assert_eq!(level(100.0), 1.0);
    }
}
