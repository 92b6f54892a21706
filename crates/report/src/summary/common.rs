//! What every summary shares: its table style, the line about a kernel-bypass side, and
//! the footer (a host both ends shared, a partial result). A leaf the kinds' summaries
//! import.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use sonde_results::document::{End, MeasuredBy};
use sonde_results::CpuBreakdown;

/// Nanoseconds as microseconds with two decimals, as the latency tables show them.
pub(super) fn us(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1e3)
}

/// ` (steal N.N%)`: the hypervisor's share of a CPU figure counted busy, where named
/// ([`CpuBreakdown::steal_named`]).
pub(crate) fn steal(b: &CpuBreakdown) -> String {
    b.steal_named()
        .map_or_else(String::new, |s| format!(" (steal {s:.1}%)"))
}

/// A table in the summaries' style with this header.
pub(crate) fn table(header: impl Into<comfy_table::Row>) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(header);
    t
}

/// What ends every summary: the shared host, whether the result is partial, and what
/// limited the run.
pub(crate) fn footer(e: &End) -> String {
    let mut out = one_host_line(e);
    if e.partial {
        out.push_str(&format!(
            "PARTIAL RESULT: {}\n",
            e.error
                .as_deref()
                .unwrap_or("the test did not run to its planned end")
        ));
    }
    out.push_str(&limited_line(e));
    out
}

/// `limited by: the receiver's window (receiver_window) because …`, for a run with a
/// verdict; empty otherwise.
pub(crate) fn limited_line(e: &End) -> String {
    e.limited_by
        .as_ref()
        .map_or_else(String::new, |l| format!("limited by: {}\n", l.sentence()))
}

/// What a side did with `--stamps`, in one line: hardware on its device or software, and
/// the stamps read by kind (the stages are always from the software ones).
pub(crate) fn stamps_line(side: &str, s: &sonde_results::stamps::SideStamps) -> String {
    let dev = s.device.as_deref().unwrap_or("its device");
    let mut line = match (&s.fallback, s.nic_hardware_on) {
        (_, true) => format!("stamps: {side}: hardware stamping on {dev} for the test"),
        (Some(why), false) => format!("stamps: {side}: software ({}: {why})", s.asked),
        (None, false) => format!("stamps: {side}: software"),
    };
    if let Some(r) = &s.read {
        line.push_str(&format!(
            "; read {} software, {} hardware",
            r.software, r.hardware
        ));
    }
    line.push_str("; stages from software stamps\n");
    line
}

/// How a side left the kernel's socket path, in one line; empty for kernel sockets.
pub(crate) fn bypass_line(by: &MeasuredBy) -> String {
    let Some(b) = &by.bypass else {
        return String::new();
    };
    let queues: Vec<String> = b.queues.iter().map(u32::to_string).collect();
    if let Some(command) = &b.command {
        // An engine that runs a tool: what it ran, and its exact command line.
        return format!(
            "bypass: {}: {} ({}) on {}, queue {}\n  {command}\n",
            by.measured_by.as_str(),
            b.program.as_deref().unwrap_or("a tool"),
            b.version.as_deref().unwrap_or("version unknown"),
            b.interface,
            queues.join(","),
        );
    }
    let mut line = format!(
        "bypass: {}: AF_XDP on {} queue {}, {} mode",
        by.measured_by.as_str(),
        b.interface,
        queues.join(","),
        if b.zero_copy { "zero-copy" } else { "copy" },
    );
    if let Some(a) = &b.attach {
        line.push_str(&format!(", {a} XDP"));
    }
    if b.busy_poll {
        line.push_str(", busy polling");
    }
    line.push('\n');
    line
}

/// Both ends on one host: its CPU once, so that nobody adds the two sides.
fn one_host_line(e: &End) -> String {
    let Some(h) = &e.one_host else {
        return String::new();
    };
    let mut line = format!(
        "both ends ran on one host ({}): its CPU is counted once",
        h.hostname
    );
    if let Some(c) = &h.cpu {
        line.push_str(&format!(
            ", {:.1} % busy of {} CPUs{}",
            c.host.busy_percent(),
            c.cpus,
            steal(&c.host)
        ));
    }
    if let Some(c) = h.cycles_per_byte {
        line.push_str(&format!(", {c:.2} cycles/byte"));
    }
    line.push_str("; each side's own figure is its process CPU\n");
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::document::MeasuredBy;
    use sonde_results::stamps::{SideStamps, StampKind, StampSource, StampsRead};
    use sonde_results::{Bypass, Role};

    #[test]
    fn a_side_says_which_stamps_it_took() {
        let mut s = SideStamps {
            asked: StampSource::Auto,
            device: Some("veth0".into()),
            nic_hardware_on: false,
            phc: None,
            stages_from: StampKind::Software,
            read: Some(StampsRead {
                software: 40,
                hardware: 0,
            }),
            fallback: Some("veth0 cannot stamp in hardware".into()),
        };
        assert_eq!(
            stamps_line("server", &s),
            "stamps: server: software (auto: veth0 cannot stamp in hardware); read 40 software, 0 hardware; stages from software stamps\n"
        );
        (s.nic_hardware_on, s.fallback, s.read) = (true, None, None);
        assert_eq!(
            stamps_line("client", &s),
            "stamps: client: hardware stamping on veth0 for the test; stages from software stamps\n"
        );
    }

    #[test]
    fn a_bypass_side_says_how_it_left_the_socket_path() {
        let mut by = MeasuredBy {
            measured_by: Role::Server,
            host: "h".into(),
            engine: Some("xdp".into()),
            threads: 2,
            pinned_cpus: None,
            bypass: None,
            cpu_latency: None,
            stamps: None,
        };
        assert_eq!(bypass_line(&by), "");
        by.bypass = Some(Bypass {
            interface: "eth0".into(),
            queues: vec![0, 1],
            zero_copy: true,
            attach: Some("native".into()),
            busy_poll: true,
            ..Default::default()
        });
        assert_eq!(
            bypass_line(&by),
            "bypass: server: AF_XDP on eth0 queue 0,1, zero-copy mode, native XDP, busy polling\n"
        );
        by.bypass = Some(Bypass {
            interface: "0000:3b:00.0".into(),
            queues: vec![0],
            program: Some("dpdk-testpmd rxonly on 1 forwarding lcore(s)".into()),
            command: Some("dpdk-testpmd -v -l 0,1 -- -i".into()),
            version: Some("DPDK 22.11.11".into()),
            ..Default::default()
        });
        assert_eq!(
            bypass_line(&by),
            "bypass: server: dpdk-testpmd rxonly on 1 forwarding lcore(s) (DPDK 22.11.11) on 0000:3b:00.0, queue 0\n  dpdk-testpmd -v -l 0,1 -- -i\n"
        );
    }
}
