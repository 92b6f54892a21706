//! `sonde tune apply` then `restore`, in a namespace on a veth: every touched setting is
//! back to its previous value, checked by reading it back; not root, a clear refusal.

mod common;

use std::process::Command;

use common::*;

fn read_in(ns: &str, path: &str) -> String {
    let o = run({
        let mut c = Lab::in_ns(ns, "cat");
        c.arg(path);
        c
    });
    stdout(&o).split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn apply_then_restore_returns_every_setting() {
    let Some(lab) = Lab::new() else { return };
    let dev = &lab.client_if;
    let files = [
        format!("/sys/class/net/{dev}/napi_defer_hard_irqs"),
        format!("/sys/class/net/{dev}/gro_flush_timeout"),
        "/proc/sys/net/ipv4/tcp_rmem".to_string(),
        "/proc/sys/net/ipv4/tcp_wmem".to_string(),
    ];
    for goal in ["latency", "throughput"] {
        let before: Vec<String> = files.iter().map(|f| read_in(&lab.client, f)).collect();
        let state = temp_file("tune-state.json");
        let o = run({
            let mut c = Lab::in_ns(&lab.client, SONDE);
            c.args(["tune", "apply", "--for", goal, "--dev", dev, "--state"])
                .arg(&state);
            c
        });
        assert!(o.status.success(), "{goal}: {}", stderr(&o));
        let during: Vec<String> = files.iter().map(|f| read_in(&lab.client, f)).collect();
        assert_ne!(
            before,
            during,
            "{goal}: apply changed nothing: {}",
            stdout(&o)
        );
        if goal == "latency" {
            assert_eq!(during[0], "2");
            assert_eq!(during[1], "200000");
        } else {
            assert_eq!(during[2], "4096 131072 16777216");
        }
        assert!(state.exists());
        let o = run({
            let mut c = Lab::in_ns(&lab.client, SONDE);
            c.args(["tune", "restore", "--state"]).arg(&state);
            c
        });
        assert!(o.status.success(), "{goal}: {}", stderr(&o));
        let after: Vec<String> = files.iter().map(|f| read_in(&lab.client, f)).collect();
        assert_eq!(before, after, "{goal}: restore did not put everything back");
        assert!(!state.exists());
    }
}

#[test]
fn not_root_is_refused_clearly() {
    let Some(_lab) = Lab::new() else { return };
    let state = temp_file("tune-nonroot.json");
    let o = run({
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            SONDE,
            "tune",
            "apply",
            "--for",
            "latency",
            "--state",
        ])
        .arg(&state);
        c
    });
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("run it as root"), "{}", stderr(&o));
    assert!(!state.exists());
}
