//! `sonde watch -- COMMAND`: runs the command and samples the same host evidence as a
//! test's side, every interval until the command ends: the interface's rates, drops and
//! interrupts, CPU per core and softirq, TCP retransmits. The command's exit code is
//! the watch's; Ctrl-C reaches the command (same process group) and the watch keeps what
//! it sampled, marked partial.

use std::os::fd::AsFd;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use sonde_probe::cpustat;
use sonde_probe::hostwatch::{self, HostProbe, HostSnap};
use sonde_results::document::watch::{WatchEnd, WatchInterval};
use sonde_results::document::{End, IntervalFigures, IntervalSection, LocalStart, Section};
use sonde_results::{Document, TestSpec, WatchSpec};

use crate::controller::SOFTWARE;
use crate::signals::Interrupt;

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot run '{command}': {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("waiting for '{command}': {source}")]
    Wait {
        command: String,
        source: std::io::Error,
    },
}

/// sonde's exit code after a watch: the command's own, or `partial_code` when a Ctrl-C
/// cut the watch before the command gave one, else 128 + the signal that ended it.
pub fn exit_code(status: ExitStatus, partial: bool, partial_code: u8) -> u8 {
    match status.code() {
        Some(c) => c.clamp(0, 255) as u8,
        None if partial => partial_code,
        None => 128u8.saturating_add(
            std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0) as u8,
        ),
    }
}

/// Runs `spec.command`, sampling `probe` every interval; the document and the command's
/// exit status. With `stdout_to_stderr` the command writes its stdout to our stderr.
pub fn watch(
    spec: &WatchSpec,
    probe: &HostProbe,
    command_line: &str,
    interrupt: &Interrupt,
    stdout_to_stderr: bool,
    live: &mut dyn FnMut(&IntervalFigures),
) -> Result<(Document, ExitStatus), WatchError> {
    let started_at = crate::controller::now_rfc3339();
    let first = probe.snapshot();
    let shown = spec.command.join(" ");
    let spawn_err = |source| WatchError::Spawn {
        command: shown.clone(),
        source,
    };
    let mut cmd = Command::new(&spec.command[0]);
    cmd.args(&spec.command[1..]);
    if stdout_to_stderr {
        // Its output on our stderr: our stdout carries one JSON document.
        let err = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_err(spawn_err)?;
        cmd.stdout(err);
    }
    let mut child = cmd.spawn().map_err(spawn_err)?;
    let every = Duration::from_millis(spec.timing.interval_ms);
    let mut intervals = Vec::new();
    let mut last = first.clone();
    let status = loop {
        let next = last.at + every;
        let status = wait_until(&mut child, next).map_err(|source| WatchError::Wait {
            command: shown.clone(),
            source,
        })?;
        let now = probe.snapshot();
        let i = interval(&first, &last, &now);
        live(&i);
        intervals.push(i);
        last = now;
        if let Some(s) = status {
            break s;
        }
    };
    let seconds = last.at.duration_since(first.at).as_secs_f64();
    let mut spec = spec.clone();
    spec.timing.duration_ms = (seconds * 1e3).round() as u64;
    let end = end_of(&first, &last, seconds, status, probe);
    let partial = interrupt.is_set();
    let error = partial.then(|| "interrupted (Ctrl-C)".to_string());
    let doc_end = End::new(partial, error, Section::Watch { watch: end });
    let start = LocalStart {
        spec: TestSpec::Watch(spec),
        command: command_line.to_string(),
        host: hostwatch::describe(probe),
        started_at,
        software: SOFTWARE.into(),
    };
    let doc = Document::local(start, intervals, doc_end);
    Ok((doc, status))
}

/// Waits for the child until `until`; its status if it ended.
fn wait_until(child: &mut Child, until: Instant) -> std::io::Result<Option<ExitStatus>> {
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(Some(s));
        }
        let now = Instant::now();
        if now >= until {
            return Ok(None);
        }
        std::thread::sleep((until - now).min(Duration::from_millis(20)));
    }
}

fn per_second(v: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        v as f64 / secs
    } else {
        0.0
    }
}

/// The evidence between snapshots `a` and `b`, placed on the watch's clock by `origin`.
fn interval(origin: &HostSnap, a: &HostSnap, b: &HostSnap) -> IntervalFigures {
    let secs = b.at.duration_since(a.at).as_secs_f64();
    let nic = a
        .nic
        .as_ref()
        .zip(b.nic.as_ref())
        .map(|(x, y)| sonde_probe::netdev::delta(x, y));
    let cpu = a.cpu.as_ref().zip(b.cpu.as_ref());
    let usage = cpu.map(|(x, y)| cpustat::usage(x, y));
    let w = WatchInterval {
        rx_bits_per_second: nic.as_ref().map(|n| per_second(n.rx_bytes * 8, secs)),
        tx_bits_per_second: nic.as_ref().map(|n| per_second(n.tx_bytes * 8, secs)),
        rx_packets_per_second: nic.as_ref().map(|n| per_second(n.rx_packets, secs)),
        tx_packets_per_second: nic.as_ref().map(|n| per_second(n.tx_packets, secs)),
        rx_dropped: nic.as_ref().map(|n| n.rx_dropped),
        tx_dropped: nic.as_ref().map(|n| n.tx_dropped),
        cpu_busy_percent: usage.as_ref().map(|u| u.host.busy_percent()),
        softirq_percent: usage.as_ref().map(|u| u.host.softirq_percent),
        steal_percent: usage.as_ref().map(|u| u.host.steal_percent),
        per_cpu_busy_percent: cpu.map_or(Vec::new(), |(x, y)| cpustat::per_cpu_busy(x, y)),
        tcp_retransmits: a.retrans.zip(b.retrans).map(|(x, y)| y.saturating_sub(x)),
        interrupts: a
            .irq_total
            .zip(b.irq_total)
            .map(|(x, y)| y.saturating_sub(x)),
    };
    let at = |s: &HostSnap| s.at.duration_since(origin.at).as_secs_f64();
    IntervalFigures {
        section: IntervalSection::Watch { watch: w },
        client_cpu_busy_percent: usage.map(|u| u.host.busy_percent()),
        ..IntervalFigures::span(at(a), at(b))
    }
}

fn end_of(
    a: &HostSnap,
    b: &HostSnap,
    seconds: f64,
    status: ExitStatus,
    probe: &HostProbe,
) -> WatchEnd {
    let mut side = sonde_results::SideResult::new(
        sonde_results::Role::Client,
        Default::default(),
        seconds,
        (0, None),
        Vec::new(),
    );
    hostwatch::fill(&mut side, a, b);
    let bps = |bytes: Option<u64>| bytes.map(|v| per_second(v * 8, seconds));
    WatchEnd {
        exit_code: status.code(),
        seconds,
        iface: probe.iface().map(String::from),
        rx_bits_per_second: bps(side.nic.as_ref().map(|n| n.rx_bytes)),
        tx_bits_per_second: bps(side.nic.as_ref().map(|n| n.tx_bytes)),
        nic: side.nic,
        cpu: side.cpu,
        tcp_retransmits: side.tcp_retransmits,
        interrupts: side.interrupts,
        notes: probe.notes().to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn the_exit_code_is_the_commands_or_says_how_it_ended() {
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8), true, 3), 7);
        // Killed by SIGTERM (15): 128 + 15, unless the watch was cut short first.
        assert_eq!(exit_code(ExitStatus::from_raw(15), false, 3), 143);
        assert_eq!(exit_code(ExitStatus::from_raw(15), true, 3), 3);
    }

    /// A snapshot of nothing but /proc/stat's `text`.
    fn snap(text: &str) -> HostSnap {
        HostSnap {
            at: Instant::now(),
            cpu: Some(cpustat::parse(text).unwrap()),
            process_cpu_s: None,
            retrans: None,
            nic: None,
            qdisc: None,
            irq_total: None,
            control: None,
            workers: Default::default(),
        }
    }

    #[test]
    fn an_interval_counts_the_hypervisors_steal_busy_and_on_its_own() {
        let a = snap("cpu 0 0 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0\n");
        // 100 ticks: 50 user, 10 softirq, 20 stolen, 20 idle.
        let b = snap("cpu 50 0 0 20 0 0 10 20\ncpu0 50 0 0 20 0 0 10 20\n");
        let i = interval(&a, &a, &b);
        let w = i.watch().unwrap();
        assert_eq!(w.cpu_busy_percent, Some(80.0));
        assert_eq!(w.softirq_percent, Some(10.0));
        assert_eq!(w.steal_percent, Some(20.0));
    }
}
