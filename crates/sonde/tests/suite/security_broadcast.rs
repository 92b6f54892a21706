//! A subnet's directed broadcast address (issue 52 L7) where a unicast reflector is
//! expected: a mesh peer list naming it was kept (every probe to it a datagram to each host
//! of the link), and `sonde stamp` to it, from this host or `--from` an agent whose
//! `--stamp-targets` hold it, failed with the socket's "Permission denied". Each is now
//! refused by name: the address, the subnet and its interface.

use crate::common;

use std::time::Duration;

use common::*;

#[test]
fn a_directed_broadcast_is_refused_by_name_as_mesh_peer_and_stamp_reflector() {
    let Some(lab) = Lab::new() else { return };
    // The server namespace's veth holds 198.18.0.2/24: its broadcast is 198.18.0.255.
    let list = temp_file("broadcast-peers");
    std::fs::write(&list, "198.18.0.1\n198.18.0.255 rack=r1\n").unwrap();
    let mut mesh = Lab::in_ns(&lab.server, SONDE);
    mesh.args(["serve", "--bind", SERVER_ADDR, "--port", "0"])
        .args(["--mesh", list.to_str().unwrap(), "--mesh-port", "8620"]);
    // Refused at start; an agent that kept the peer would serve on: killed after 10 s.
    let mut child = mesh
        .stderr(std::process::Stdio::piped())
        .spawn_keeping(Keep::Both);
    let status = wait_with_timeout(&mut child, Duration::from_secs(10));
    if status.is_none() {
        let _ = child.kill();
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(1),
        "kept the broadcast as a peer: {}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("line 2: 198.18.0.255:8620 is the broadcast address of 198.18.0.0/24"),
        "{}",
        stderr(&o)
    );

    let agent = lab.start_agent_with(&["--stamp-targets", "198.18.0.0/24"]);
    let mut from = Lab::in_ns(&lab.client, SONDE);
    from.args(["stamp", "198.18.0.255", "--from", SERVER_ADDR])
        .args(["--port", &agent.port.to_string(), "-n", "5", "--no-save"]);
    let o = run(from);
    let said = stderr(&o);
    assert!(!o.status.success(), "{said}");
    assert!(
        said.contains(
            "refused to send STAMP to 198.18.0.255:862: the broadcast address of 198.18.0.0/24"
        ),
        "{said}"
    );
    assert!(!said.contains("Permission denied"), "{said}");

    // From this host: the client's 198.18.0.1/24.
    let mut here = Lab::in_ns(&lab.client, SONDE);
    here.args(["stamp", "198.18.0.255:8620", "-n", "5", "--no-save"]);
    let o = run(here);
    let said = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(
        said.contains("198.18.0.255:8620: the broadcast address of 198.18.0.0/24"),
        "{said}"
    );
}
