"""Plants each bottleneck `end.limited_by` should name, in namespaces, and keeps every run's
document as evidence for the rules: a shaper on the sender's egress and in a router the
sender cannot see, small socket buffers, nftables dropping segments, a CPU hog on the
receiver's worker core, the test's own --rate, a pps receiver that overflows, rpc and ping.

Each document is written to OUT/<scenario>-<magnitude>.json as soon as it is collected, and
one line per run is appended to OUT/INDEX.md. Runs are short (-t 4) with pinned workers:
the client's on CPU 0, the agent's on CPU 1. Addresses are 198.18.0.0/15 only; the
namespaces go at exit, also on failure.

    sudo python3 bench/limit_evidence.py [--out DIR] [--only SCENARIO,...]
"""

import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import netns as N  # noqa: E402  (scratch key and store, the flat pair, root check)

ROUTER_NS = "sbench-r"
ROUTED_SERVER = "198.19.0.2"
PORT = "5301"
CLIENT_CPU, SERVER_CPU = "0", "1"
RMEM_MAX = "/proc/sys/net/core/rmem_max"


def routed_up():
    """Client, router, agent: 198.18.0.1 -> 198.18.0.254 | 198.19.0.254 -> 198.19.0.2, as
    the tests' `Lab::routed`; the router's interface toward the agent is `sbrs`."""
    routed_down()
    for ns in (N.CLIENT_NS, ROUTER_NS, N.SERVER_NS):
        N.sh("ip", "netns", "add", ns)
    N.sh("ip", "link", "add", "sbc", "netns", N.CLIENT_NS, "type", "veth", "peer", "name", "sbrc", "netns", ROUTER_NS)
    N.sh("ip", "link", "add", "sbs", "netns", N.SERVER_NS, "type", "veth", "peer", "name", "sbrs", "netns", ROUTER_NS)
    for ns, dev, addr, via in [(N.CLIENT_NS, "sbc", "198.18.0.1/24", "198.18.0.254"),
                               (N.SERVER_NS, "sbs", ROUTED_SERVER + "/24", "198.19.0.254")]:
        N.sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
        N.sh("ip", "-n", ns, "link", "set", dev, "up")
        N.sh("ip", "-n", ns, "link", "set", "lo", "up")
        N.sh("ip", "-n", ns, "route", "add", "default", "via", via)
    for dev, addr in [("sbrc", "198.18.0.254/24"), ("sbrs", "198.19.0.254/24")]:
        N.sh("ip", "-n", ROUTER_NS, "addr", "add", addr, "dev", dev)
        N.sh("ip", "-n", ROUTER_NS, "link", "set", dev, "up")
    N.sh("ip", "netns", "exec", ROUTER_NS, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")


def routed_down():
    N.sh("ip", "netns", "del", ROUTER_NS, check=False, stderr=subprocess.DEVNULL)
    N.netns_down()


@contextlib.contextmanager
def lab(routed=False, agent_prefix=()):
    """Namespaces and an agent in the server one for one scenario; yields the agent's
    address. `agent_prefix` runs before `sonde serve` (setpriv, ...)."""
    (routed_up if routed else N.netns_up)()
    addr = ROUTED_SERVER if routed else N.SERVER
    agent = None
    try:
        agent = subprocess.Popen(["ip", "netns", "exec", N.SERVER_NS, *agent_prefix, SONDE, "serve",
                                  "--bind", addr, "--port", PORT],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        agent.stdout.readline()  # "listening on ...": the agent is up
        yield addr
    finally:
        if agent:
            agent.terminate()
            agent.wait(5)
        (routed_down if routed else N.netns_down)()


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def busy(side):
    """Busy percent of each pinned worker CPU of a side (100 - idle - iowait)."""
    cpus = ((side or {}).get("cpu") or {}).get("worker_cpus") or []
    return [round(100 - c["idle_percent"] - c["iowait_percent"]) for c in cpus]


def tcp_med(side, key):
    s = ((side or {}).get("tcp_info") or {}).get(key)
    return s["median"] if s else None


def fmt(v, nd=1):
    return "-" if v is None else f"{v:.{nd}f}"


def index_row(scenario, magnitude, cmd, doc):
    """One INDEX.md line: what the run carried and the figures the rules read."""
    end = doc.get("end") or {}
    lb = end.get("limited_by") or {}
    verdict = f"{lb.get('verdict', '-')} {fmt(lb.get('strength'), 2)}"
    if lb.get("runner_up"):
        verdict += f" (ru {lb['runner_up']['verdict']} {fmt(lb['runner_up']['strength'], 2)})"
    snd, rcv = end.get("sender"), end.get("receiver")
    if doc.get("test") == "stream":
        rate = f"{rcv['bits_per_second'] / 1e9:.3f} Gbit/s" if rcv else "-"
        rtx = (snd or {}).get("tcp_retransmits", {}).get("connections")
        figs = (f"rwnd {fmt(tcp_med(snd, 'rwnd_limited_percent'))} % | sndbuf {fmt(tcp_med(snd, 'sndbuf_limited_percent'))} % | "
                f"rtx {rtx} (dsack {fmt(tcp_med(snd, 'dsack_dups'), 0)}) | srtt {fmt(tcp_med(snd, 'srtt_us'), 0)} us / "
                f"min {fmt(tcp_med(snd, 'min_rtt_us'), 0)} us")
    elif doc.get("test") == "pps":
        rate = f"{rcv['packets_per_second'] / 1e6:.3f} Mpps" if rcv else "-"
        figs = (f"sent {snd and snd.get('total_packets')} | lost {end.get('lost_packets')} | "
                f"socket drops {(end.get('packets') or {}).get('socket_drops')}")
    else:
        c = end.get("client") or {}
        rate = f"{fmt(c.get('messages_per_second'), 0)} msg/s"
        lat = {k: v / 1e3 for k, v in (end.get("latency_ns") or {}).items() if k in ("p50", "p99")}
        figs = f"latency p50 {fmt(lat.get('p50'))} us p99 {fmt(lat.get('p99'))} us | tcp rtx {c.get('tcp_retransmits')}"
        snd, rcv = end.get("client"), end.get("server")
    cpus = f"busy snd {busy(snd)} rcv {busy(rcv)}"
    return f"| {scenario} | {magnitude} | `{cmd}` | {rate} | {figs} | {cpus} | {verdict} |\n"


def collect(scenario, magnitude, argv):
    """Runs the controller in the client namespace, saves its document at once and
    indexes it; the document, or None when the run failed (the failure is indexed too)."""
    cmd = [SONDE, *argv, "--json", "--no-save"]
    p = subprocess.run(["ip", "netns", "exec", N.CLIENT_NS, *cmd], capture_output=True, text=True, timeout=120)
    shown = " ".join(shlex.quote(a) for a in ["sonde", *argv])
    path = os.path.join(OUT, f"{scenario}-{magnitude}.json")
    with open(INDEX, "a") as idx:
        if p.returncode != 0 or not p.stdout.strip():
            idx.write(f"| {scenario} | {magnitude} | `{shown}` | FAILED rc {p.returncode}: {p.stderr.strip()[:200]} |||| \n")
            print(f"{scenario}-{magnitude}: FAILED {p.stderr.strip()[:300]}", flush=True)
            return None
        with open(path, "w") as f:
            f.write(p.stdout)
        doc = json.loads(p.stdout)
        row = index_row(scenario, magnitude, shown, doc)
        idx.write(row)
    print(row.strip(), flush=True)
    return doc


def stream(addr, *extra, secs="4"):
    return ["stream", addr, "--port", PORT, "-t", secs, "--warmup", "1",
            "--cpus", CLIENT_CPU, "--server-cpus", SERVER_CPU, *extra]


@contextlib.contextmanager
def hogs(n, cpu=SERVER_CPU, secs=12, ns=N.SERVER_NS):
    """`n` busy loops on `cpu` in namespace `ns`, each bounded by `timeout`."""
    ps = [subprocess.Popen(["ip", "netns", "exec", ns, "taskset", "-c", cpu, "timeout", str(secs),
                            "sh", "-c", "while :; do :; done"]) for _ in range(n)]
    try:
        time.sleep(0.3)
        yield
    finally:
        for p in ps:
            p.terminate()
            p.wait(5)


def server_nft_drop(addr, per_mille, proto):
    """nftables in the agent's namespace dropping `per_mille` of the test's data packets
    (TCP segments longer than a bare ACK, or UDP), never the control port's."""
    rules = (f"add table inet lim\n"
             f"add chain inet lim in {{ type filter hook input priority 0 ; }}\n")
    match = (f"tcp dport != {PORT} ip length > 100" if proto == "tcp" else "meta l4proto udp")
    rules += f"add rule inet lim in ip daddr {addr} {match} numgen random mod 1000 < {per_mille} counter drop\n"
    subprocess.run(["ip", "netns", "exec", N.SERVER_NS, "nft", "-f", "-"], input=rules, text=True, check=True)


def sc_none():
    with lab() as a:
        collect("none", "P1", stream(a, "-P", "1"))
        collect("none", "P4", stream(a, "-P", "4"))


def sc_tbf_sender():
    for rate in ("200mbit", "1gbit"):
        with lab() as a:
            N.sh("ip", "netns", "exec", N.CLIENT_NS, "tc", "qdisc", "add", "dev", "sbc", "root", "tbf",
                 "rate", rate, "burst", "256kb", "latency", "20ms")
            collect("tbf-sender", rate, stream(a, "-P", "1"))


def sc_tbf_router():
    for rate in ("200mbit", "1gbit"):
        with lab(routed=True) as a:
            N.sh("ip", "netns", "exec", ROUTER_NS, "tc", "qdisc", "add", "dev", "sbrs", "root", "tbf",
                 "rate", rate, "burst", "256kb", "latency", "20ms")
            collect("tbf-router", rate, stream(a, "-P", "1"))


def sc_buffers():
    with lab() as a:
        for flag, name in (("--rcvbuf", "rcvbuf"), ("--sndbuf", "sndbuf")):
            for size in ("64K", "256K"):
                collect(name, size, stream(a, "-P", "1", flag, size))


def sc_buffers_tiny():
    """Buffers of a few KiB: the round trip between two namespaces is a few microseconds
    and this kernel has no netem to lengthen it, so on a bare veth a window of 64 KiB still
    carries 10 Gbit/s; only windows of one or two segments hold TCP back."""
    with lab() as a:
        for flag, name in (("--rcvbuf", "rcvbuf"), ("--sndbuf", "sndbuf")):
            for size in ("4K", "8K", "16K"):
                collect(name, size, stream(a, "-P", "1", flag, size))


def sc_nft_drop():
    for per_mille, name in ((5, "0.5pct"), (30, "3pct")):
        with lab() as a:
            server_nft_drop(a, per_mille, "tcp")
            collect("nft-drop", name, stream(a, "-P", "1"))


def sc_cpu_hog():
    with lab() as a:
        for n in (1, 2):
            with hogs(n):
                collect("cpu-hog", f"{n}hog", stream(a, "-P", "1"))


def sc_rate():
    with lab() as a:
        for rate in ("300M", "2G"):
            collect("rate", rate, stream(a, "-P", "1", "--rate", rate))


def sc_directions():
    with lab() as a:
        collect("reverse", "P1", stream(a, "-P", "1", "--reverse"))
        collect("bidir", "P1", stream(a, "-P", "1", "--bidir"))


def pps(addr, *extra):
    return ["pps", addr, "--port", PORT, "-t", "4", "--warmup", "1", "--rx-threads", "1",
            "--cpus", CLIENT_CPU, "--server-cpus", SERVER_CPU, *extra]


def sc_pps():
    with lab() as a:
        collect("pps", "plain", pps(a))
        collect("pps", "rate100k", pps(a, "--rate", "100000"))
    # As root the agent forces an 8 MiB receive buffer past rmem_max (SO_RCVBUFFORCE):
    # without CAP_NET_ADMIN it is held to net.core.rmem_max, small enough for one receiving
    # thread to overflow at Linux's default (212992); rmem_max is not per namespace here,
    # so it is lowered for these runs only and put back.
    no_force = ("setpriv", "--bounding-set", "-net_admin")
    with lab(agent_prefix=no_force) as a:
        collect("pps-smallbuf", "rx1-gso-rmemmax-host", pps(a, "--gso", "--tx-threads", "1"))
    old = open(RMEM_MAX).read().strip()
    try:
        with open(RMEM_MAX, "w") as f:
            f.write("212992")
        with lab(agent_prefix=no_force) as a:
            collect("pps-smallbuf", "rx1-rmemmax-212992", pps(a))
            collect("pps-smallbuf", "rx1-gso-rmemmax-212992", pps(a, "--gso", "--tx-threads", "1"))
    finally:
        with open(RMEM_MAX, "w") as f:
            f.write(old)
    with lab() as a:
        server_nft_drop(a, 20, "udp")
        collect("pps-nft-drop", "2pct", pps(a, "--rate", "100000"))


def rr(addr, test, *extra):
    return [test, addr, "--port", PORT, "-t", "4", "--warmup", "1",
            "--cpus", CLIENT_CPU, "--server-cpus", SERVER_CPU, *extra]


def sc_rpc():
    with lab() as a:
        collect("rpc", "C32", rr(a, "rpc", "-C", "32"))
        collect("rpc", "rate5k", rr(a, "rpc", "-C", "32", "--rate", "5000"))
        collect("ping", "plain", rr(a, "ping"))
        with hogs(1):
            collect("rpc-cpu-hog", "1hog", rr(a, "rpc", "-C", "32"))


def sc_reverse_planted():
    """The same bottlenecks with the agent sending (--reverse): the receiver is now the
    client, so a verdict must name the other side's figures."""
    with lab() as a:
        with hogs(2, cpu=CLIENT_CPU, ns=N.CLIENT_NS):
            collect("reverse-cpu-hog", "2hog-on-client", stream(a, "-P", "1", "--reverse"))
        collect("reverse-rcvbuf", "4K", stream(a, "-P", "1", "--reverse", "--rcvbuf", "4K"))
        collect("reverse-rate", "300M", stream(a, "-P", "1", "--reverse", "--rate", "300M"))
    with lab() as a:
        N.sh("ip", "netns", "exec", N.SERVER_NS, "tc", "qdisc", "add", "dev", "sbs", "root", "tbf",
             "rate", "200mbit", "burst", "256kb", "latency", "20ms")
        collect("reverse-tbf-agent", "200mbit", stream(a, "-P", "1", "--reverse"))


def sc_more():
    """Other magnitudes and connection counts than the tests use."""
    with lab() as a:
        with hogs(1):
            collect("cpu-hog", "1hog-P4", stream(a, "-P", "4"))
        collect("rcvbuf", "64K-P4", stream(a, "-P", "4", "--rcvbuf", "64K"))
        collect("sndbuf", "64K-P4", stream(a, "-P", "4", "--sndbuf", "64K"))
        collect("rate", "5G-P4", stream(a, "-P", "4", "--rate", "5G"))
        collect("rate", "12G-P4-near-capacity", stream(a, "-P", "4", "--rate", "12G"))
    with lab() as a:
        server_nft_drop(a, 1, "tcp")
        collect("nft-drop", "0.1pct", stream(a, "-P", "1"))
    with lab() as a:
        N.sh("ip", "netns", "exec", N.CLIENT_NS, "tc", "qdisc", "add", "dev", "sbc", "root", "tbf",
             "rate", "5gbit", "burst", "1mb", "latency", "5ms")
        collect("tbf-sender", "5gbit-P4", stream(a, "-P", "4"))
    with lab(routed=True) as a:
        N.sh("ip", "netns", "exec", ROUTER_NS, "tc", "qdisc", "add", "dev", "sbrs", "root", "tbf",
             "rate", "50mbit", "burst", "64kb", "latency", "50ms")
        collect("tbf-router", "50mbit-P4", stream(a, "-P", "4"))


SCENARIOS = {
    "none": sc_none, "tbf-sender": sc_tbf_sender, "tbf-router": sc_tbf_router, "buffers": sc_buffers, "buffers-tiny": sc_buffers_tiny,
    "nft-drop": sc_nft_drop, "cpu-hog": sc_cpu_hog, "rate": sc_rate, "directions": sc_directions,
    "pps": sc_pps, "rpc": sc_rpc,
    "reverse-planted": sc_reverse_planted, "more": sc_more,
}

if __name__ == "__main__":
    args = N.parse_args(1, 4, ("--out", dict(default="/work/lim/evidence")),
                        ("--only", dict(default=",".join(SCENARIOS))))
    SONDE, OUT = args.sonde, args.out
    INDEX = os.path.join(OUT, "INDEX.md")
    os.makedirs(OUT, exist_ok=True)
    if not os.path.exists(INDEX):
        with open(INDEX, "w") as f:
            f.write("| scenario | magnitude | command | receiver rate | sender TCP figures | worker CPU busy % | verdict |\n"
                    "|---|---|---|---|---|---|---|\n")
    try:
        for name in args.only.split(","):
            SCENARIOS[name]()
    finally:
        routed_down()
