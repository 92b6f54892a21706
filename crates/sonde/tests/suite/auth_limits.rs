//! A keyed agent refuses controllers without the key; limits refuse what exceeds them;
//! idle and garbage connections cannot hold the agent.

use crate::common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::*;

/// A key file as an operator makes it: 0600, or the agent refuses it.
fn key_file(contents: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = temp_file("key");
    std::fs::write(&p, contents).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

fn stream(agent: &Agent, args: &[&str]) -> std::process::Output {
    let mut c = sonde_cmd();
    c.args(agent.short_test("stream", "0.5", args));
    run(c)
}

/// A controller with no key at all (not even the harness's).
fn stream_without_key(agent: &Agent) -> std::process::Output {
    let mut c = sonde_cmd();
    c.env_remove(KEY_ENV)
        .args(agent.short_test("stream", "0.5", &[]));
    run(c)
}

#[test]
fn keyed_agent_serves_only_the_right_key() {
    let good = key_file("a shared secret of enough length\n");
    let bad = key_file("another secret of enough length\n");
    let agent = Agent::on_loopback_with(&["--key-file", good.to_str().unwrap()]);
    let o = stream(&agent, &["--key-file", good.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = stream_without_key(&agent);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("requires a key"), "{}", stderr(&o));
    // The agent proves the key first: a controller with another key stops there.
    let o = stream(&agent, &["--key-file", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("could not prove it holds the key"),
        "{}",
        stderr(&o)
    );
    // The agent is not worse for it.
    let o = stream(&agent, &["--key-file", good.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_controller_with_a_key_refuses_an_agent_without_one() {
    let agent = Agent::start({
        let mut c = sonde_cmd();
        c.env_remove(KEY_ENV)
            .args(["serve", "--bind", "127.0.0.1", "--port", "0"]);
        c
    });
    let _serial = Serial::take();
    let o = stream(&agent, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("does not ask for a key"),
        "{}",
        stderr(&o)
    );
    // Without a key both ends agree (loopback only).
    let o = stream_without_key(&agent);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn an_agent_off_loopback_needs_a_key_or_says_insecure() {
    let o = run({
        let mut c = sonde_cmd();
        c.env_remove(KEY_ENV)
            .args(["serve", "--bind", "0.0.0.0", "--port", "0"]);
        c
    });
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("without --key-file") && e.contains("--insecure-no-key"),
        "{e}"
    );
}

#[test]
fn short_missing_or_open_key_files_are_named() {
    use std::os::unix::fs::PermissionsExt;
    let short = key_file("tiny");
    let o = run({
        let mut c = sonde_cmd();
        c.args([
            "serve",
            "--port",
            "0",
            "--key-file",
            short.to_str().unwrap(),
        ]);
        c
    });
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--key-file") && stderr(&o).contains("at least 16 bytes"),
        "{}",
        stderr(&o)
    );
    // A key others can read, or a directory, is refused by agent and controller alike.
    let open = key_file("a shared secret of enough length\n");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let open = open.to_str().unwrap();
    for args in [
        vec!["serve", "--port", "0", "--key-file", open],
        vec!["stream", "127.0.0.1", "--key-file", open],
    ] {
        let o = run({
            let mut c = sonde_cmd();
            c.args(&args);
            c
        });
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let want = format!("refused --key-file {open}: mode 0644");
        assert!(stderr(&o).contains(&want), "{}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("chmod 600 {open}")),
            "{}",
            stderr(&o)
        );
    }
    let o = run({
        let mut c = sonde_cmd();
        c.args(["serve", "--port", "0", "--key-file", "/tmp"]);
        c
    });
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("refused --key-file /tmp: not a regular file"),
        "{}",
        stderr(&o)
    );
    let o = run({
        let mut c = sonde_cmd();
        c.args(["stream", "127.0.0.1", "--key-file", "/nonexistent/key"]);
        c
    });
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot read --key-file /nonexistent/key"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn limits_refuse_and_name_the_agent_flag() {
    let agent = Agent::on_loopback_with(&[
        "--max-duration",
        "2",
        "--max-connections",
        "2",
        "--max-rate",
        "1000",
    ]);
    let sonde = |test: &str, secs: &str, extra: &[&str]| {
        let mut c = sonde_cmd();
        c.args(agent.short_test(test, secs, extra));
        run(c)
    };
    // Each refusal names the agent's flag that refused it.
    for (test, secs, extra, flag) in [
        ("stream", "5", &[][..], "--max-duration"),
        ("stream", "0.5", &["-P", "4"], "--max-connections"),
        ("pps", "0.5", &[], "--max-rate"),
        ("pps", "0.5", &["--rate", "5000"], "--max-rate"),
    ] {
        let o = sonde(test, secs, extra);
        assert!(
            stderr(&o).contains(flag),
            "{test} {extra:?}: {}",
            stderr(&o)
        );
    }
    let o = sonde("pps", "0.5", &["--rate", "500"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn an_idle_connection_does_not_block_the_agent() {
    let agent = Agent::on_loopback_with(&[]);
    // Connects and says nothing (esnet/iperf#788).
    let _idle = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let o = stream(&agent, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[test]
fn garbage_and_idle_connections_while_a_test_runs() {
    let Some(lab) = Lab::new() else { return };
    let agent = lab.start_agent();
    let pid = agent.child.id();
    let before = rss_kib(pid);
    let mut real = lab.stream(&agent, &["-P", "2", "-t", "3", "--warmup", "0.3", "--json"]);
    let real = real.spawn_keeping(Keep::Both);
    std::thread::sleep(Duration::from_millis(500));
    // 200 peers at once from the client namespace: half idle, half sending garbage.
    let port = agent.port.to_string();
    let script = format!(
        "for i in $(seq 1 100); do exec 3<>/dev/tcp/{SERVER_ADDR}/{port} 2>/dev/null & done; \
         for i in $(seq 1 100); do (printf 'GET / HTTP/1.1\\r\\n\\r\\n\\x00\\x00\\x00\\x10{{\"type\":1}}garbage' > /dev/tcp/{SERVER_ADDR}/{port}) 2>/dev/null & done; \
         sleep 2; wait"
    );
    let peers = Lab::in_ns(&lab.client, "bash")
        .args(["-c", &script])
        .spawn_keeping(Keep::Nothing);
    let out = real.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the real test failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["end"]["partial"], false);
    let _ = peers.wait_with_output();
    let after = rss_kib(pid);
    eprintln!("agent RSS {before} KiB before, {after} KiB after");
    assert!(
        after < before + 64 * 1024,
        "agent memory grew from {before} to {after} KiB"
    );
    // And it still serves.
    let o = run(lab.stream(&agent, &["-t", "0.5", "--warmup", "0.1"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let _ = std::io::stdout().flush();
}
