"""Shared helpers of the benchmark scripts: a veth pair between two namespaces
(198.18.0.1 -> 198.18.0.2), servers started in one, clients run in the other, and CPU
time read the same way for every tool."""

import argparse
import atexit
import contextlib
import os
import resource
import subprocess
import sys
import time

CLIENT_NS, SERVER_NS = "sbench-c", "sbench-s"
# Benchmark runs never go into the user's result store: every sonde started from a script
# importing this module saves into a scratch store instead (or is given --no-save).
os.environ["SONDE_DB"] = os.path.join("/tmp", f"sonde-bench-{os.getpid()}-results.db")
# Agents off loopback need a key, and controllers prove it: every sonde started from a script
# takes this scratch key (0600) through SONDE_KEY_FILE, removed at exit.
_KEY = os.path.join("/tmp", f"sonde-bench-{os.getpid()}-key")
with open(os.open(_KEY, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as _f:
    _f.write(os.urandom(24).hex())


def _clean_up():
    """The scratch key and store (with SQLite's -wal and -shm) go when the script ends."""
    for path in (_KEY, *(os.environ["SONDE_DB"] + s for s in ("", "-wal", "-shm"))):
        if os.path.exists(path):
            os.remove(path)


atexit.register(_clean_up)
os.environ["SONDE_KEY_FILE"] = _KEY
SERVER = "198.18.0.2"
HZ = os.sysconf("SC_CLK_TCK")


def sh(*args, check=True, **kw):
    return subprocess.run(list(args), check=check, **kw)


def netns_up(queues=1):
    """The pair, with `queues` transmit and receive queues on each end (a multi-queue NIC's
    shape: AF_XDP takes a socket per queue)."""
    netns_down()
    sh("ip", "netns", "add", CLIENT_NS)
    sh("ip", "netns", "add", SERVER_NS)
    q = ["numtxqueues", str(queues), "numrxqueues", str(queues)]
    sh("ip", "link", "add", "sbc", "netns", CLIENT_NS, *q, "type", "veth", "peer", "name", "sbs", "netns", SERVER_NS, *q)
    for ns, dev, addr in [(CLIENT_NS, "sbc", "198.18.0.1"), (SERVER_NS, "sbs", SERVER)]:
        sh("ip", "-n", ns, "addr", "add", addr + "/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def netns_down():
    for ns in (CLIENT_NS, SERVER_NS):
        sh("ip", "netns", "del", ns, check=False, stderr=subprocess.DEVNULL)


def in_datagrams():
    """Udp InDatagrams in the server namespace: datagrams the kernel delivered to a socket."""
    out = subprocess.run(["ip", "netns", "exec", SERVER_NS, "cat", "/proc/net/snmp"], capture_output=True, text=True, check=True).stdout
    rows = [l.split() for l in out.splitlines() if l.startswith("Udp:")]
    return int(rows[1][rows[0].index("InDatagrams")])


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def children_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def start_server(argv, cpu=None):
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    p = subprocess.Popen(["ip", "netns", "exec", SERVER_NS] + pin + argv,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(0.5)
    return p


def client(argv, cpu=None):
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    return sh("ip", "netns", "exec", CLIENT_NS, *pin, *argv, capture_output=True, text=True).stdout




def rpc_end(sonde, t, flows, extra):
    """The `end` of one `sonde rpc` of `t` s over `flows` connections against the agent on
    port 5301 of the server namespace, with `extra` flags."""
    import json
    argv = [sonde, "rpc", SERVER, "--port", "5301", "-C", str(flows), "-t", str(t), "--warmup", "0.5",
            "--json", "--no-save", *extra]
    return json.loads(client(argv))["end"]


def parse_args(runs, secs, *extra):
    """The flags every benchmark takes (--runs, --time, --sonde), plus `extra` as
    (flag, add_argument keywords) pairs; refuses to run without root."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=runs)
    ap.add_argument("--time", type=int, default=secs)
    ap.add_argument("--sonde", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "sonde"))
    for flag, kw in extra:
        ap.add_argument(flag, **kw)
    a = ap.parse_args()
    a.sonde = os.path.abspath(a.sonde)
    if os.geteuid() != 0:
        sys.exit("run as root: the benchmark builds network namespaces")
    return a


@contextlib.contextmanager
def namespaces(queues=1):
    """The two namespaces for the length of a benchmark; yields a dict the caller adds its
    servers to, each stopped on the way out, as the namespaces are deleted."""
    netns_up(queues)
    servers = {}
    try:
        yield servers
    finally:
        for s in servers.values():
            s.terminate()
        netns_down()


def rotations(names, run):
    """The order of the tools in run `run`: each run starts one tool later."""
    k = run % len(names)
    return names[k:] + names[:k]


def alternate(tools, runs, pause=0.5):
    """Each tool of `tools` (name: a call returning one run's figures) once a run, for
    `runs` runs, each run starting one tool later; each tool's figures, run by run."""
    got = {k: [] for k in tools}
    for run in range(runs):
        for name in rotations(list(tools), run):
            got[name].append(tools[name]())
            time.sleep(pause)
    return got


def sonde_run(sonde, argv, secs, port, serve_extra=(), warmup="0.5"):
    """One sonde test (`argv`: the test and its flags) against its own agent in the server
    namespace, on `port`; the result document."""
    import json
    import threading
    agent = subprocess.Popen(["ip", "netns", "exec", SERVER_NS, sonde, "serve", "--bind", SERVER,
                              "--port", port, *serve_extra],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # Ready once it says it listens (its log goes on being read, so it never blocks).
        for line in agent.stderr:
            if "listening on" in line:
                break
        threading.Thread(target=agent.stderr.read, daemon=True).start()
        cmd = [sonde, argv[0], SERVER, *argv[1:], "--port", port, "-t", str(secs),
               "--warmup", warmup, "--json", "--no-save"]
        r = sh("ip", "netns", "exec", CLIENT_NS, *cmd, check=False, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[-2000:]} {r.stdout[-3000:]}")
        return json.loads(r.stdout)
    finally:
        agent.terminate()
        agent.wait()
