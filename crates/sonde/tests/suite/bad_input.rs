//! Bad input: a clear one-line error naming the cause, a non-zero exit, never a panic.

use crate::common;

use common::*;

fn sonde(args: &[&str]) -> std::process::Output {
    run({
        let mut c = sonde_cmd();
        c.args(args);
        c
    })
}

fn assert_one_line_error(o: &std::process::Output, code: i32, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    assert!(err.contains(needle), "'{needle}' not in: {err}");
}

#[test]
fn unknown_host() {
    let o = sonde(&["stream", "no-such-host.invalid", "-t", "1"]);
    assert_one_line_error(&o, 1, "cannot resolve host 'no-such-host.invalid'");
}

#[test]
fn agent_not_running() {
    // Bind then drop to find a port where nothing listens.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let o = sonde(&[
        "stream",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "-t",
        "1",
    ]);
    assert_one_line_error(&o, 1, "is `sonde serve` running there?");
}

#[test]
fn invalid_flag_values_name_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["stream", "h", "-P", "0"], "--connections"),
        (&["stream", "h", "-P", "abc"], "--connections"),
        (&["stream", "h", "-t", "0"], "--duration"),
        (&["stream", "h", "-t", "soon"], "--duration"),
        (&["stream", "h", "-i", "10ms"], "--interval"),
        (&["stream", "h", "-l", "0"], "--buffer"),
        (&["stream", "h", "-l", "9G"], "--buffer"),
        (&["stream", "h", "--threads", "0"], "--threads"),
        (&["stream", "h", "--cpus", "3-1"], "--cpus"),
        (&["stream", "h", "--congestion", "no way"], "--congestion"),
        (&["pps", "h", "--engine", "warp"], "--engine"),
        (&["stream", "h", "--engine", "xdp"], "--engine"),
        (&["rpc", "h", "--engine", "Kernel"], "--engine"),
        (&["stream", "h", "-R", "--bidir"], "--bidir"),
        (&["stream", "h", "--port", "70000"], "--port"),
        (&["serve", "--bind", "nowhere"], "--bind"),
        (&["stream"], "<HOST>"),
        (&["fleet", "f.toml", "--every", "500ms"], "--every"),
        (&["fleet", "f.toml", "--every", "ten minutes"], "--every"),
        (
            &["fleet", "f.toml", "--every", "1m", "--resume"],
            "--resume",
        ),
        (
            &["fleet", "f.toml", "--every", "1m", "--max-load", "0"],
            "--max-load",
        ),
        (
            &["fleet", "f.toml", "--every", "1m", "--max-load", "150"],
            "--max-load",
        ),
        (
            &["fleet", "f.toml", "--metrics", "127.0.0.1:9464"],
            "--every",
        ),
        (
            &["fleet", "f.toml", "--every", "1m", "--metrics", "nowhere"],
            "--metrics",
        ),
    ];
    for (args, flag) in cases {
        let o = sonde(args);
        assert_one_line_error(&o, 2, flag);
    }
}

#[test]
fn congestion_algorithm_unknown_to_the_kernel() {
    let agent = Agent::on_loopback();
    let o = sonde(&[
        "stream",
        "127.0.0.1",
        "--port",
        &agent.port.to_string(),
        "--congestion",
        "nosuchcc",
        "-t",
        "1",
    ]);
    assert_one_line_error(&o, 1, "'nosuchcc'");
}

#[test]
fn serve_on_a_taken_port() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let o = sonde(&["serve", "--bind", "127.0.0.1", "--port", &port]);
    assert_one_line_error(&o, 1, "--bind/--port");
}

#[test]
fn ping_and_rpc_bad_values_name_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["rpc", "h", "-W", "0"], "--window"),
        (&["rpc", "h", "--req-size", "2M"], "--req-size"),
        (&["ping", "h", "--udp", "-m", "65508"], "--msg-size"),
        (&["rpc", "h", "--rate", "0"], "--rate"),
        (&["ping", "h", "--poll", "sometimes"], "--poll"),
        (&["rpc", "h", "--crr", "-W", "4"], "--window"),
        (&["ping", "h", "-t", "0"], "--duration"),
    ];
    for (args, flag) in cases {
        let o = sonde(args);
        assert_one_line_error(&o, 2, flag);
    }
}

#[test]
fn pps_bad_values_name_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["pps", "h", "--size", "57"], "--size"),
        (&["pps", "h", "--flows", "0"], "--flows"),
        (&["pps", "h", "--batch", "0"], "--batch"),
        (&["pps", "h", "--rate", "0"], "--rate"),
        (
            &["pps", "h", "--tx-threads", "4", "--flows", "2"],
            "--tx-threads",
        ),
        (&["pps", "h", "--poll", "all"], "--poll"),
        (&["pps", "h", "--search", "--max-loss", "100"], "--max-loss"),
    ];
    for (args, flag) in cases {
        let o = sonde(args);
        assert_one_line_error(&o, 2, flag);
    }
}

#[test]
fn host_inventory_of_a_captured_e192_tree() {
    let root = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../probe/tests/fixtures/azure-e192-mana"
    );
    let o = sonde(&["host", "--root", root, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let inv: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(inv["cpu"]["online"].as_array().unwrap().len(), 192);
    assert_eq!(inv["cpu"]["numa_nodes"].as_array().unwrap().len(), 4);
    let rules: Vec<&str> = inv["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rule"].as_str().unwrap())
        .collect();
    assert!(rules.contains(&"workers-on-nic-numa-node"), "{rules:?}");
    let o = sonde(&["host", "--root", root]);
    let text = stdout(&o);
    assert!(
        text.contains("accelerated networking: yes, VF enP30832s1"),
        "{text}"
    );
    assert!(text.contains("NUMA node 3   CPUs 144-191"), "{text}");
    // The MANA NIC's device argument, ready for --dpdk-dev.
    assert!(
        text.contains("DPDK        sonde --dpdk-dev vdev:7870:00:00.0,mac="),
        "{text}"
    );
    let o = sonde(&["host", "--root", "/nonexistent-tree"]);
    assert_one_line_error(&o, 1, "--root /nonexistent-tree");
}

#[test]
fn host_inventory_of_this_machine() {
    let o = sonde(&["host", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let inv: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(!inv["cpu"]["online"].as_array().unwrap().is_empty());
    assert!(inv["sysctls"]["net.core.busy_poll"].is_string());
    // The hypervisor's steal since boot, as the kernel's own counters say it just after.
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let ticks: Vec<f64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|t| t.parse().unwrap())
        .collect();
    let kernels = ticks[7] * 100.0 / ticks.iter().sum::<f64>();
    let ours = inv["steal_since_boot_percent"].as_f64().unwrap();
    assert!(
        (ours - kernels).abs() < 0.01,
        "ours {ours} %, the kernel's {kernels} %"
    );
    let text = stdout(&sonde(&["host"]));
    assert!(text.contains("\n  steal since boot  "), "{text}");
}

#[test]
fn third_party_paths_name_what_is_wrong() {
    // Both a HOST and --to, or --from alone: usage errors that name the flags.
    let o = sonde(&[
        "stream",
        "127.0.0.1",
        "--from",
        "127.0.0.2",
        "--to",
        "127.0.0.3",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--to"), "{}", stderr(&o));
    let o = sonde(&["ping", "--from", "127.0.0.1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("<HOST>"), "{}", stderr(&o));
    // One agent as both ends (`--from X --to X`), with room for `max_tests` at once.
    let ping_itself = |max_tests: &str| {
        let agent = Agent::on_loopback_with(&["--max-tests", max_tests, "--allow", "third-party"]);
        let port = agent.port.to_string();
        let both = [
            "ping",
            "--from",
            "127.0.0.1",
            "--to",
            "127.0.0.1",
            "--port",
            &port,
        ];
        let o = sonde(&[&both[..], &SHORT_JSON].concat());
        (o, port)
    };
    // One test at a time: the client part is refused as busy, tried again for 5 s (a
    // note says so once), and the error names the agent and how long it tried.
    let (o, port) = ping_itself("1");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.trim().lines().collect();
    assert_eq!(lines.len(), 2, "a note and the error: {err}");
    assert!(
        lines[0].starts_with(&format!(
            "note: the agent at 127.0.0.1:{port} is busy; trying again"
        )),
        "{err}"
    );
    assert!(
        lines[1].contains(&format!("agent at 127.0.0.1:{port}: the agent is busy"))
            && lines[1].contains("a controller tries a busy agent for up to 5 s"),
        "{err}"
    );
    // With room for both parts, the client part is still refused: it would send to a
    // loopback address (this host's own services), which no client part does.
    let (o, port) = ping_itself("2");
    assert_one_line_error(&o, 1, &format!("agent at 127.0.0.1:{port}"));
    assert!(stderr(&o).contains("loopback"), "{}", stderr(&o));
}

#[test]
fn fleet_key_file_at_fault_is_named() {
    let file = temp_file("fleet.toml");
    let text = "name = \"f\"\n[[agent]]\naddress = \"198.18.2.1\"\n[[agent]]\naddress = \"198.18.2.2\"\n[[test]]\ntype = \"ping\"\n";
    std::fs::write(&file, text).unwrap();
    let fleet = |key: &str| sonde(&["fleet", file.to_str().unwrap(), "--key-file", key]);
    let o = fleet("/nonexistent/fleet.key");
    assert_one_line_error(&o, 1, "cannot read --key-file /nonexistent/fleet.key");
    // A key others may read: refused with the fix, before any agent is asked.
    let open = temp_file("open.key");
    std::fs::write(&open, "0123456789abcdef0123456789abcdef").unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let o = fleet(open.to_str().unwrap());
    let p = open.display();
    assert_one_line_error(&o, 1, &format!("refused --key-file {p}: mode 0644"));
    assert!(
        stderr(&o).contains(&format!("chmod 600 {p}")),
        "{}",
        stderr(&o)
    );
}
