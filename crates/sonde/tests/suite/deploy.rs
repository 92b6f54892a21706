//! What deploy/ ships, checked without a cluster: the Kubernetes manifests against the
//! Kubernetes schemas, and the static executable (deploy/build-static.sh, which
//! scripts/test.sh runs first) working alone in an empty root, names resolved and all.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{need_tools, run, skip_unless, stderr, stdout, temp_file, Agent, Serial, SHORT_JSON};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_kubernetes_manifests_validate_against_the_schemas() {
    if !need_tools(&["kubernetes-validate"]) {
        return;
    }
    let dir = repo().join("deploy/kubernetes");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    assert!(files.len() >= 6, "{files:?}");
    let o = run({
        let mut c = Command::new("kubernetes-validate");
        c.arg("--strict").args(&files);
        c
    });
    let log = format!("{}{}", stdout(&o), stderr(&o));
    assert!(o.status.success(), "{log}");
    for kind in ["daemonset/", "service/", "job/", "secret/", "configmap/"] {
        assert!(log.contains(kind), "no {kind} validated: {log}");
    }
    // The validator refuses what the API server would.
    let bad = temp_file("bad.yaml");
    let text = std::fs::read_to_string(dir.join("agent-daemonset.yaml")).unwrap();
    std::fs::write(&bad, text.replace("containerPort:", "containerPortz:")).unwrap();
    let o = run({
        let mut c = Command::new("kubernetes-validate");
        c.arg("--strict").arg(&bad);
        c
    });
    assert!(!o.status.success());
}

#[test]
fn each_agent_daemonset_labels_its_agent_with_its_node_and_pod_address() {
    for name in ["agent-daemonset.yaml", "agent-daemonset-hostnetwork.yaml"] {
        let text = std::fs::read_to_string(repo().join("deploy/kubernetes").join(name)).unwrap();
        for want in [
            r#""--label", "node=$(NODE_NAME)""#,
            r#""--label", "pod_ip=$(POD_IP)""#,
            "- name: NODE_NAME\n              valueFrom: {fieldRef: {fieldPath: spec.nodeName}}",
            "- name: POD_IP\n              valueFrom: {fieldRef: {fieldPath: status.podIP}}",
        ] {
            assert!(text.contains(want), "{name} lacks {want}");
        }
    }
}

/// The static executable, if scripts/test.sh (or deploy/build-static.sh) made it.
fn static_sonde() -> Option<PathBuf> {
    let path = repo().join("target/static/sonde");
    let missing = (!path.is_file())
        .then(|| format!("run bash deploy/build-static.sh to make {}", path.display()));
    // SAFETY: geteuid has no preconditions.
    let not_root = (unsafe { libc::geteuid() } != 0).then(|| "not root".to_string());
    (skip_unless("the static executable", missing) && skip_unless("root, for chroot", not_root))
        .then_some(path)
}

#[test]
fn the_static_executable_serves_and_tests_by_name_in_an_empty_root() {
    let Some(exe) = static_sonde() else { return };
    let o = run({
        let mut c = Command::new("file");
        c.arg("-L").arg(&exe);
        c
    });
    if o.status.success() {
        let what = stdout(&o);
        assert!(what.contains("static"), "not a static executable: {what}");
    }
    // An empty root: the executable and the two files a container runtime provides.
    let root = temp_file("root");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::copy(&exe, root.join("sonde")).unwrap();
    std::fs::write(root.join("etc/hosts"), "127.0.0.1 agent.sonde.test\n").unwrap();
    std::fs::write(root.join("etc/resolv.conf"), "nameserver 127.0.0.1\n").unwrap();
    let chrooted = |args: &[&str]| {
        let mut c = Command::new("chroot");
        c.arg(&root).arg("/sonde").args(args);
        c
    };
    let _serial = Serial::take();
    let mut agent = Agent::start({
        let mut c = chrooted(&["serve", "--bind", "127.0.0.1", "--port", "0"]);
        c.env("SONDE_DB", "/nowhere.db");
        c
    });
    let port = agent.port.to_string();
    let to = ["ping", "agent.sonde.test", "--port", &port];
    let o = run(chrooted(&[&to[..], &SHORT_JSON].concat()));
    agent.kill();
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        doc["end"]["latency_ns"]["p50"].as_u64().unwrap() > 0,
        "{}",
        doc["end"]
    );
    let _ = std::fs::remove_dir_all(root);
}

#[test]
fn the_monitor_serves_its_metrics_only_with_the_token_it_mounts() {
    let text =
        std::fs::read_to_string(repo().join("deploy/kubernetes/fleet-monitor.yaml")).unwrap();
    for want in [
        r#""--metrics-token-file", "/etc/sonde-metrics/token""#,
        "- {name: metrics-token, mountPath: /etc/sonde-metrics, readOnly: true}",
        "secret: {secretName: sonde-metrics-token, defaultMode: 288}",
        "authorization: {credentials_file: ",
        "tcpSocket: {port: metrics}",
    ] {
        assert!(text.contains(want), "fleet-monitor.yaml lacks {want}");
    }
    assert!(
        !text.contains("prometheus.io/scrape: \"true\""),
        "annotated for scrapes without the token"
    );
}
