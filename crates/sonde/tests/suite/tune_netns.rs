//! `sonde tune apply` then `restore`, in a namespace on a veth: every touched setting is
//! back to its previous value, checked by reading it back; not root, a clear refusal.

use crate::common;

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
            // Each TCP ceiling reaches 16 MiB, and none is lowered (this kernel's tcp_rmem
            // default is already 32 MiB).
            let max = |v: &str| v.split_whitespace().last().unwrap().parse::<u64>().unwrap();
            for i in [2, 3] {
                assert!(max(&during[i]) >= 16 << 20, "{}", during[i]);
                assert!(
                    max(&during[i]) >= max(&before[i]),
                    "{} -> {}",
                    before[i],
                    during[i]
                );
            }
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
    let Some(_lab) = Lab::needing(&["setpriv"]) else {
        return;
    };
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

#[test]
fn tune_on_a_test_is_restored_after_ctrl_c() {
    let Some(lab) = Lab::new() else { return };
    let agent = lab.start_agent();
    let napi = format!("/sys/class/net/{}/napi_defer_hard_irqs", lab.client_if);
    let before = read_in(&lab.client, &napi);
    let mut cmd = lab.sonde(
        &agent,
        "ping",
        &["--tune", "latency", "-t", "20", "--warmup", "0.2"],
    );
    let mut child = cmd.spawn_keeping(Keep::Nothing);
    std::thread::sleep(std::time::Duration::from_millis(1200));
    assert_eq!(
        read_in(&lab.client, &napi),
        "2",
        "--tune latency was not applied during the test"
    );
    // SAFETY: signals our own child (ip netns exec has exec'd sonde).
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let status = wait_with_timeout(&mut child, std::time::Duration::from_secs(5))
        .expect("ping ignored Ctrl-C");
    assert_eq!(status.code(), Some(3));
    assert_eq!(
        read_in(&lab.client, &napi),
        before,
        "--tune was not restored after Ctrl-C"
    );
}
