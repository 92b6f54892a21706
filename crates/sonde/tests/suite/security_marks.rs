//! What a controller's marks can make an agent send (issue 57): a test's `--dscp` and
//! `--control-dscp` are applied on the agent's own packets (answers, reverse streams,
//! its end of the control connection), so a key holder could have the agent send network
//! control (CS6, CS7: the class routers keep for their routing protocols) at
//! `--max-bitrate`. The agent refuses those classes unless `serve --allow-dscp` lists them.

use crate::common;

use common::stamp_lab::plant;
use common::*;

/// The attack: a UDP ping asking CS7 (then CS6 for the control connection) of a default
/// agent, the agent's namespace counting the CS6/CS7 packets it sends (nftables' output
/// hook). Refused by name and nothing sent; an operator's `--allow-dscp cs7` lets it run.
#[test]
fn a_controller_cannot_make_the_agent_send_network_control_unless_allowed() {
    let Some(lab) = Lab::needing(&["nft"]) else {
        return;
    };
    let rule = ["ip", "dscp", "{", "cs6,", "cs7", "}", "counter"];
    plant(&lab.server, "mkvictim", "output", &rule);
    let sent = || nft_counted(&lab.server, "mkvictim", "packets");
    let ping = |agent: &Agent, marks: &[&str]| {
        let mut args = vec!["-t", "0.5", "--warmup", "0", "--udp", "--rate", "100"];
        args.extend_from_slice(marks);
        args.push("--no-save");
        run(lab.sonde(agent, "ping", &args))
    };
    let mut agent = lab.start_agent();
    for (flag, marks) in [
        ("--dscp", &["--dscp", "cs7"][..]),
        ("--control-dscp", &["--control-dscp", "cs6"][..]),
    ] {
        let out = ping(&agent, marks);
        let err = stderr(&out);
        assert!(!out.status.success(), "{flag}: {}", stdout(&out));
        assert!(
            err.contains(flag) && err.contains("--allow-dscp"),
            "{flag}: {err}"
        );
        assert_eq!(sent(), 0, "{flag}: CS6/CS7 packets the agent sent");
    }
    // EF is not network control: allowed by default.
    let out = ping(&agent, &["--dscp", "ef"]);
    assert!(out.status.success(), "ef: {}", stderr(&out));
    assert_eq!(sent(), 0);
    agent.kill();
    let agent = lab.start_agent_with(&["--allow-dscp", "cs7"]);
    let out = ping(&agent, &["--dscp", "cs7"]);
    assert!(out.status.success(), "allowed: {}", stderr(&out));
    assert!(sent() >= 40, "{} CS7 answers once allowed", sent());
}
