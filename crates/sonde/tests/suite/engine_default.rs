//! Defaults pick the fastest engine: `sonde rpc` without `--engine` runs io_uring on both
//! sides and says so; an agent on a host where io_uring is disabled runs the kernel engine
//! for the same command (and says why), while an explicit `--engine uring` is refused,
//! naming the agent's missing engine.

use crate::common;

use common::*;

/// Holds `kernel.io_uring_disabled` at 2 until dropped, restoring the value found. The
/// lab's timing lock is held meanwhile: no other test starts a sonde then.
struct Disabled(Option<String>);

const SYSCTL: &str = "/proc/sys/kernel/io_uring_disabled";

impl Disabled {
    fn set() -> Disabled {
        let old = std::fs::read_to_string(SYSCTL).ok();
        if old.is_some() {
            std::fs::write(SYSCTL, "2").unwrap();
        }
        Disabled(old)
    }
}

impl Drop for Disabled {
    fn drop(&mut self) {
        if let Some(v) = &self.0 {
            let _ = std::fs::write(SYSCTL, v.trim());
        }
    }
}

fn rpc(lab: &Lab, agent: &Agent, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["-C", "4", "-t", "1", "--warmup", "0.2", "--json"];
    args.extend_from_slice(extra);
    run(lab.sonde(agent, "rpc", &args))
}

fn notes(side: &serde_json::Value) -> String {
    side["notes"].to_string()
}

/// The note on the default is the controller's alone, in the document and on the
/// terminal: said once, not once per side.
#[test]
fn rpc_defaults_to_io_uring_and_says_so_once() {
    let Some(lab) = Lab::new() else {
        return;
    };
    let agent = lab.start_agent();
    let doc = doc_of(&rpc(&lab, &agent, &[]));
    assert_eq!(doc["start"]["spec"]["engine"], "uring");
    assert_eq!(doc["start"]["spec"]["engine_auto"], true);
    let said = |side: &str| {
        notes(&doc["end"][side])
            .matches("chosen by default")
            .count()
    };
    for side in ["client", "server"] {
        let s = &doc["end"][side];
        assert_eq!(s["engine"], "uring", "{side}: {s}");
    }
    let client = notes(&doc["end"]["client"]);
    assert!(client.contains("not measured on this one"), "{client}");
    assert_eq!((said("client"), said("server")), (1, 0), "{}", doc["end"]);
    // The terminal's summary says it once too.
    let text = stdout(&run(lab.sonde(
        &agent,
        "rpc",
        &["-t", "0.3", "--warmup", "0.1"],
    )));
    assert_eq!(text.matches("chosen by default").count(), 1, "{text}");
    assert!(
        text.contains("note: client: engine uring: chosen by default"),
        "{text}"
    );
    // ping's fastest is the kernel engine's.
    let ping = doc_of(&run(lab.sonde(&agent, "ping", &["-t", "0.5", "--json"])));
    assert_eq!(ping["end"]["client"]["engine"], "kernel");
}

#[test]
fn an_agent_without_io_uring_runs_the_kernel_engine_for_the_default() {
    let Some(lab) = Lab::new() else {
        return;
    };
    if !std::path::Path::new(SYSCTL).exists() {
        println!("SKIPPED: needs {SYSCTL} (Linux 6.6 or later)");
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI lacks {SYSCTL}"
        );
        return;
    }
    // The agent probes io_uring before it says it listens: started while disabled, it
    // never offers it; the controller, started after, has it.
    let agent = {
        let _off = Disabled::set();
        lab.start_agent()
    };
    let doc = doc_of(&rpc(&lab, &agent, &[]));
    let (client, server) = (&doc["end"]["client"], &doc["end"]["server"]);
    assert_eq!(client["engine"], "uring", "{client}");
    assert_eq!(server["engine"], "kernel", "{server}");
    assert!(server["messages"].as_u64().unwrap() > 100, "{server}");
    let why = notes(server);
    assert!(
        why.contains("cannot run uring") && why.contains("io_uring_disabled"),
        "{why}"
    );

    let o = rpc(&lab, &agent, &["--engine", "uring"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("rpc/uring"), "{e}");
}
