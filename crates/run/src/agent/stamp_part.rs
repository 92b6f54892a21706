//! A STAMP run a controller asks of this agent (`Stamp`): test packets to an agent-less
//! reflector, a router's, which no grant can vouch for. So the destination must be in the
//! networks this agent's operator listed (`--stamp-targets`, none by default), and the run
//! is under every limit a client part is; then `sonde stamp`'s own sender runs on this
//! host and its document goes back to the controller. A run without one answer for a few
//! seconds stops there ([`crate::stamp::silence`]).

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use sonde_proto::PeerError;
use sonde_results::StampSpec;

use super::conn::{Conn, TestError, LINGER};
use super::limits::stamp_demand;
use super::shared::Shared;
use crate::signals::Interrupt;
use crate::stamp::Cidr;

/// How often the watch looks at the agent's own stop flag, between the wake-ups of the
/// control connection and the run's end.
const WATCH_STEP: Duration = Duration::from_millis(100);

/// Checks, runs and answers one STAMP run to `reflector`; the log line's summary.
pub(super) fn run(
    conn: &mut Conn,
    mut spec: StampSpec,
    (reflector, command): (SocketAddr, &str),
    shared: &Shared,
) -> Result<String, TestError> {
    let Some(mut slot) = shared.take_slot() else {
        return Err(conn.refuse(PeerError::Busy));
    };
    let refused = |conn: &mut Conn, message: String| conn.refuse(PeerError::Refused { message });
    let subnets = sonde_probe::host::local_subnets();
    if let Some(why) = refused_target(&shared.cfg.stamp_targets, reflector, &subnets) {
        return Err(refused(conn, why));
    }
    // The controller asks for authenticated mode; the key is only ever this operator's.
    let key = shared.cfg.stamp_sender_key.as_ref();
    if spec.authenticated && key.is_none() {
        return Err(refused(conn, "refused authenticated STAMP: this agent holds no key for the reflectors (its operator gives one: sonde serve --stamp-sender-key-file FILE); the controller's key never crosses the control connection".into()));
    }
    let key = key.filter(|_| spec.authenticated);
    // The destination is the address checked, never a name the agent would resolve.
    spec.host = reflector.ip().to_string();
    spec.port = reflector.port();
    if let Err(e) = spec.validate() {
        return Err(conn.refuse(PeerError::InvalidSpec {
            flag: e.flag.into(),
            reason: e.reason,
        }));
    }
    let demand = stamp_demand(&spec);
    let limits = &shared.cfg.limits;
    if let Some(why) = limits.check_stamp(&spec, &demand) {
        return Err(refused(conn, why));
    }
    let client_bits = demand.bits_per_s.unwrap_or(f64::INFINITY);
    if let Err(why) = shared.book(&mut slot, &demand, client_bits) {
        return Err(refused(conn, why.to_string()));
    }
    tracing::info!(
        "STAMP to {reflector} for a controller: {} packets of {} B at {}/s",
        spec.packets(),
        spec.packet_bytes,
        spec.rate_per_s
    );
    // A reflector that never answers ends the run within seconds, not at its length.
    let gap = Duration::from_secs_f64(1.0 / spec.rate_per_s);
    let give_up = crate::stamp::silence::limit(gap, Duration::from_millis(spec.timeout_ms));
    let doc = match watched(conn, &shared.interrupt, |stop| {
        crate::stamp::sender::run_to(reflector, &spec, key, command, stop, Some(give_up))
    })? {
        Ok(doc) => doc,
        Err(e) => return Err(refused(conn, e.to_string())),
    };
    let summary = doc.end.stamp().map_or_else(String::new, |s| {
        format!(
            "STAMP to {reflector}: {} sent, {} answered",
            s.sent, s.received
        )
    });
    conn.session.send_stamp_done(doc)?;
    conn.link.send(&mut conn.session)?;
    conn.link.close_gracefully(LINGER);
    Ok(summary)
}

/// Runs `send` on its own thread while this one watches the control connection: should
/// the controller go away (or break the protocol) or the agent stop, `send`'s flag is set,
/// so that no run outlives the controller that asked for it.
fn watched<T: Send>(
    conn: &mut Conn,
    interrupt: &Interrupt,
    send: impl FnOnce(&Interrupt) -> T + Send,
) -> Result<T, TestError> {
    let stop = Interrupt::none();
    // The thread's end closes when `send` returns, which wakes the watch at once.
    let (done_rx, done_tx) = UnixStream::pair()?;
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            let _done = done_tx;
            send(&stop)
        });
        let mut lost = None;
        while !sender.is_finished() {
            if interrupt.is_set() {
                stop.set();
            }
            let step = Instant::now() + WATCH_STEP;
            let wake = Some(done_rx.as_raw_fd());
            // Nothing is due from the controller now: its close, or any frame, ends the run.
            if let Err(e) = conn.link.step(&mut conn.session, Some(step), wake) {
                stop.set();
                lost = Some(e.to_string());
                break;
            }
        }
        let out = sender.join().expect("the STAMP sender does not panic");
        match lost {
            Some(why) => Err(TestError::Lost(why)),
            None => Ok(out),
        }
    })
}

/// Why `reflector` is no place for this agent's STAMP packets, if it is not: outside
/// `targets` (`--stamp-targets`), or an address no single reflector has (among them the
/// broadcast address of one of this host's `subnets`).
pub fn refused_target(
    targets: &[Cidr],
    reflector: SocketAddr,
    subnets: &[sonde_probe::host::Subnet],
) -> Option<String> {
    let ip = match reflector.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    let what = match ip {
        ip if ip.is_unspecified() => Some("the unspecified address"),
        ip if ip.is_multicast() => Some("a multicast address"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("the broadcast address"),
        _ if reflector.port() == 0 => Some("port 0"),
        _ => None,
    };
    if let Some(what) = what {
        return Some(format!(
            "refused to send STAMP to {reflector}: {what} is no reflector's"
        ));
    }
    if let Some(s) = sonde_probe::host::broadcast_of(ip, subnets) {
        return Some(format!(
            "refused to send STAMP to {reflector}: the broadcast address of {} ({}) is no reflector's",
            s.network(),
            s.iface
        ));
    }
    if targets.is_empty() {
        return Some(format!("refused to send STAMP to {reflector}: this agent has no --stamp-targets, so it sends STAMP nowhere (its operator lists the reflectors' networks: sonde serve --stamp-targets CIDR)"));
    }
    if crate::stamp::guard::allowed(targets, ip) {
        return None;
    }
    let listed: Vec<String> = targets.iter().map(|c| c.to_string()).collect();
    Some(format!(
        "refused to send STAMP to {reflector}: {ip} is not in this agent's --stamp-targets ({})",
        listed.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn only_listed_networks_unicast_and_a_real_port() {
        let t = cidrs(&["198.18.2.0/24", "198.19.0.7"]);
        let link = [sonde_probe::host::Subnet {
            iface: "eth1".into(),
            addr: "198.18.2.1".parse().unwrap(),
            prefix: 24,
        }];
        let ok = |a: &str| refused_target(&t, a.parse().unwrap(), &link);
        assert_eq!(ok("198.18.2.50:862"), None);
        assert_eq!(ok("198.19.0.7:8620"), None);
        assert_eq!(ok("[::ffff:198.18.2.9]:862"), None);
        let e = ok("198.18.3.1:862").unwrap();
        assert!(
            e.contains("--stamp-targets")
                && e.contains("198.18.3.1:862")
                && e.contains("198.18.2.0/24"),
            "{e}"
        );
        for bad in [
            "198.19.0.8:862",
            "0.0.0.0:862",
            "224.0.0.1:862",
            "255.255.255.255:862",
            "198.18.2.50:0",
        ] {
            assert!(ok(bad).is_some(), "{bad}");
        }
        // The directed broadcast of a subnet inside the targets, refused by name.
        assert_eq!(
            ok("198.18.2.255:862").as_deref(),
            Some("refused to send STAMP to 198.18.2.255:862: the broadcast address of 198.18.2.0/24 (eth1) is no reflector's")
        );
        let all = cidrs(&["0.0.0.0/0"]);
        assert!(refused_target(&all, "255.255.255.255:862".parse().unwrap(), &[]).is_some());
        let e = refused_target(&[], "198.18.2.50:862".parse().unwrap(), &[]).unwrap();
        assert!(
            e.contains("no --stamp-targets") && e.contains("198.18.2.50:862"),
            "{e}"
        );
    }
}
