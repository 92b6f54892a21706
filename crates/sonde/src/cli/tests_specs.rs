//! Every test command's flags into the specs they run: a table of command lines (every
//! kind, the engines, the odd flags, refusals) against the JSON their plans serialized to
//! when the table was written (`tests/fixtures/cli_specs.json`). A change to a flag's
//! spec shows here; `SONDE_BLESS_SPECS=1` writes the fixture again after a deliberate one.

use serde_json::{json, Value};
use sonde_run::measure::Plan;

use super::{Cli, Command};

/// `line` (after `sonde`, split as a shell would) parsed, or a panic: every test module of
/// the CLI reads its command lines so.
pub(crate) fn parsed(line: &str) -> Command {
    let words = shell_words::split(line).expect("a line that splits");
    <Cli as clap::Parser>::try_parse_from(std::iter::once("sonde".to_string()).chain(words))
        .unwrap_or_else(|e| panic!("{line}: {e}"))
        .command
}

/// The command lines, after `sonde`.
const LINES: &[&str] = &[
    // stream
    "stream h",
    "stream h -P 8 --bidir -l 64K --cpus 0-1 --server-cpus 1",
    "stream h -R -C bbr --nodelay --sndbuf 1M --rcvbuf 2M -b 2.5G --threads 2 --server-threads 3 -t 3 --warmup 0.5 -i 0.25 --cooldown 0",
    "stream h --zerocopy",
    "stream h --zerocopy --engine kernel",
    "stream h --engine uring --zerocopy -l 16K --cpus none --server-cpus none --cpu-latency-us 0",
    "stream h --engine dpdk",
    "stream h --engine xdp",
    "stream h -P 0",
    "stream h -l 0",
    "stream --from a --to b -p 6000 -t 100ms",
    // ping
    "ping h",
    "ping h --udp -m 32 --poll all",
    "ping h --rate 100 --poll hybrid=2ms --busy-poll-us 50",
    "ping h --poll busy --engine kernel",
    "ping h --self-noise",
    "ping h --self-noise=0.5 --poll all",
    "ping h --stages",
    "ping h --udp --stages",
    "ping h --stages --engine uring",
    "ping h --udp --stages --engine xdp",
    "rpc h --udp --stages --resp-size 44 -C 4",
    "rpc h --stages --resp-size 8",
    "rpc h --resp-size 8",
    "ping h --stages all",
    "ping h --stages off",
    "ping h --stages 4 --rate 1000",
    "ping h --stamps auto",
    "rpc h --stamps hardware -C 2",
    "ping h --stages off --stamps hardware",
    "ping h --rate 1000 -t 5",
    "rpc h --crr",
    "load h --stages off",
    "load h --ping-size 16",
    "ping h --engine xdp",
    "ping h --engine xdp --self-noise",
    "ping h --engine dpdk",
    "ping h --udp -m 4",
    "ping h -m 1M",
    "ping h --engine uring --sqpoll",
    "ping h --sqpoll",
    "ping h --sqpoll --engine kernel",
    "ping h --server-stall 100:200",
    "ping h --rate 0",
    // rpc
    "rpc h",
    "rpc h -C 8 -W 32 --rate 1000 --poll hybrid=100us --udp",
    "rpc h -m 1024",
    "rpc h --req-size 100 --resp-size 2000 --threads 2 --server-threads 4",
    "rpc h --crr",
    "rpc h --crr --engine uring",
    "rpc h --crr --udp",
    "rpc h --engine xdp -C 4 -W 32 -m 1024",
    "rpc h --engine xdp --crr",
    "rpc h -W 0",
    "rpc h -C 0",
    "rpc h --poll all --self-noise",
    "rpc h --engine kernel --poll all",
    "rpc h --engine dpdk",
    "rpc h --sqpoll --engine kernel",
    "rpc h --self-noise --engine uring",
    "rpc h --cpus 0-3 --server-cpus auto --cpu-latency-us 10",
    // pps
    "pps h",
    "pps ::1 --flows 4 --rate 1e6 --batch 16 --rx-threads 2 --size 128",
    "pps h --gso --batch 64",
    "pps h --gso --batch 128",
    "pps h --tx-threads 4 --flows 2",
    "pps h --tx-threads 2 --flows 8",
    "pps h --poll all",
    "pps h --poll busy",
    "pps h --search",
    "pps h --search --trial 2 --max-loss 0.1 --resolution 2 --trials-per-step 3 --rate 1e6",
    "pps h --search --max-loss 100",
    "pps h --search --resolution 0",
    "pps h --engine xdp --flows 2",
    "pps h --engine dpdk",
    "pps h --engine dpdk --flows 3",
    "pps h --engine dpdk --dpdk-dev=--vdev=7870:00:00.0,mac=7c:1e:52:0f:c6:95 --server-dpdk-dev 0000:3b:00.0 --tx-queues 4 --rx-queues 8 --descriptors 1024 --dpdk-args '--no-huge -m 512 --no-pci -- --mbcache=512' --server-dpdk-args '--no-huge -- --burst=64'",
    "pps h --dpdk-dev 0000:3b:00.0",
    "pps h --rx-queues 2",
    "pps h --engine dpdk --dpdk-dev eth0",
    "pps h --engine dpdk --dpdk-args \"'open\"",
    "pps h --engine dpdk --server-dpdk-args \"'open\"",
    "pps h --engine dpdk --gso",
    "pps h --engine dpdk --descriptors 8",
    "pps h --size 20",
    "pps h --engine uring",
    "pps h --cpus 1 --server-cpus 0,2 -t 2 -i 0.5 --warmup 0",
    // load
    "load h",
    "load h --load pps -t 2",
    "load h --load pps --phases idle,upload,both",
    "load h --load rpc",
    "load h --load rpc --phases idle,both -P 2 --ping-rate 50 --ping-size 128 -i 1 --warmup 0",
    "load h --load rpc --phases idle,upload",
    "load h --ping-rate 0",
    "load h -P 0",
    "load h --engine dpdk",
    "load h --engine uring --cpus 0 --server-cpus none",
    "load h --phases download,idle",
    // watch
    "watch --iface lo -- true",
    "watch --peer 127.0.0.1 -i 2 --json -- sleep 1",
    "watch --json-stream -- true",
    "watch -i 0.01 -- x",
    "watch --iface no-such-if0 -- x",
    // stamp
    "stamp h",
    "stamp [::1]:8620 -r 100 -n 50 -s 200 --stateful --ssid 7 --wait 0.5 -i 0.5",
    "stamp h -s 46",
    "stamp h -r 0",
];

/// What a command line plans, or the refusal (flag and text), as JSON.
fn planned(line: &str) -> Value {
    let plan = match &parsed(line) {
        Command::Watch(a) => a.plan(),
        Command::Stamp(a) => a.plan().expect("no key file read"),
        other => other.test().expect("a test command").0,
    };
    match plan {
        Ok(Plan::Tests(specs)) => json!({ "tests": specs }),
        Ok(Plan::Search(spec, p)) => json!({
            "search": spec,
            "max_loss_percent": p.max_loss_percent,
            "resolution_percent": p.resolution_percent,
            "trials_per_step": p.trials_per_step,
        }),
        Ok(Plan::Load(spec)) => json!({ "load": spec }),
        Ok(Plan::Iperf3(spec, _)) => json!({ "iperf3": spec }),
        Ok(Plan::Watch {
            spec,
            probe,
            stdout_to_stderr,
        }) => json!({
            "watch": spec,
            "probe_iface": probe.iface(),
            "stdout_to_stderr": stdout_to_stderr,
        }),
        Ok(Plan::Stamp { spec, key }) => json!({ "stamp": spec, "key": key.is_some() }),
        Ok(Plan::Own(runner)) => json!({ "own": runner.spec() }),
        Err(e) => json!({ "refused": { "flag": e.flag, "text": e.to_string() } }),
    }
}

/// This thread on one CPU, so that the defaults chosen from the usable CPUs (pps sending
/// threads, testpmd's lcores) are the same on every host.
fn one_cpu() {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and sched_*affinity only
    // read and write the set given.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        assert_eq!(libc::sched_getaffinity(0, size, &mut set), 0);
        let first = (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &set))
            .expect("a usable CPU");
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(first, &mut one);
        assert_eq!(libc::sched_setaffinity(0, size, &one), 0);
    }
    assert_eq!(sonde_engine::usable_cpus(), 1);
}

#[test]
fn command_lines_build_the_specs_they_always_built() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cli_specs.json");
    one_cpu();
    let now: Vec<Value> = LINES
        .iter()
        .map(|l| json!({ "line": l, "plan": planned(l) }))
        .collect();
    let text = serde_json::to_string_pretty(&now).unwrap() + "\n";
    if std::env::var_os("SONDE_BLESS_SPECS").is_some() {
        std::fs::write(path, &text).unwrap();
    }
    let kept: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(
        kept.len(),
        now.len(),
        "the table and the fixture differ in length"
    );
    for (k, n) in kept.iter().zip(&now) {
        assert_eq!(k, n, "{} plans otherwise than it did", n["line"]);
    }
}
