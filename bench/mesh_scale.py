#!/usr/bin/env python3
"""What `sonde serve --mesh` costs an agent (issue 46): N agents in namespaces on one bridge
(198.18.6.k), each probing every other at --rate probes/s per peer, each answering the
others' probes; per agent CPU (its process's user + system time over the window, as a share
of one core) and RSS. Then one agent alone with P phantom peers (every probe leaves, none
is answered) at one probe per peer every 10 s,
for the memory and sending cost at 1,000 and 10,000 peers (198.19.0.0/16 is routed to a
sink namespace that drops it). With --soak SECS, the mesh runs
that long and each agent's RSS is sampled every 30 s (memory flat or not). With
--napi-threads, every veth's receive path runs in NAPI kernel threads (as a NIC's does in its
softirq) instead of on the sending agent's CPU, and their CPU is given apart.

Not a test: run it on a quiet machine (BENCHMARKS.md). Namespaces are `mshb-*`, all
deleted at exit, also on failure.

    python3 bench/mesh_scale.py --agents 50 --rate 1 --secs 30 --phantom 1000,10000
"""

import argparse
import atexit
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import netns as N  # noqa: E402  (scratch key and store, removed at exit)

PRE = "mshb"
BRIDGE = f"{PRE}-br"
MADE = []


def sh(*args, check=True, **kw):
    return subprocess.run(list(args), check=check, **kw)


def ns_add(name):
    sh("ip", "netns", "add", name)
    MADE.append(name)
    sh("ip", "-n", name, "link", "set", "lo", "up")


def down():
    for name in reversed(MADE):
        sh("ip", "netns", "del", name, check=False, stderr=subprocess.DEVNULL)
    MADE.clear()


atexit.register(down)


NEIGH = "/proc/sys/net/ipv4/neigh/default/gc_thresh{}"


def neigh_room(entries):
    """Room for `entries` in the kernel's ARP table, restored at exit. The table is one for
    every namespace (its gc_thresh sysctls are the host's): 50 agents probing each other on
    one bridge hold 2,450 entries, past the default hard limit of 1,024, and the kernel
    refuses the rest ("neighbor table overflow"): whole peers went silent, 40 % of the probes
    lost. A host whose mesh peers share its L2 segment needs the same room."""
    old = {i: int(open(NEIGH.format(i)).read()) for i in (2, 3)}
    new = {2: max(old[2], 2 * entries), 3: max(old[3], 4 * entries)}
    if new == old:
        return

    def write(values, order):
        for i in order:
            with open(NEIGH.format(i), "w") as f:
                f.write(str(values[i]))

    # thresh2 stays at or under thresh3 at every step.
    write(new, (3, 2))
    atexit.register(lambda: write(old, (2, 3)))


def addr(k):
    return f"198.18.6.{k}"


def napi_threads(ns, dev):
    """The receive path of `dev` in kernel threads of its own (veth's NAPI, switched on by
    GRO, threaded), as a NIC's softirq is: without it veth runs the bridge and the peer's
    whole receive path on the sender's CPU, charged to the sending process."""
    # A socket's UDP takes veth's NAPI path only if the receiver forwards UDP GRO.
    sh("ip", "netns", "exec", ns, "ethtool", "-K", dev, "gro", "on", "rx-udp-gro-forwarding", "on",
       stdout=subprocess.DEVNULL)
    sh("ip", "netns", "exec", ns, "sh", "-c", f"echo 1 > /sys/class/net/{dev}/threaded")


def napi_pids():
    """The bench's NAPI kernel threads ("napi/mshb..."; the name is cut at 15 bytes)."""
    out = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/comm") as f:
                if f.read().startswith(f"napi/{PRE}"):
                    out.append(int(d))
        except (OSError, ValueError):
            pass
    return out


def up(n, threaded=False):
    ns_add(BRIDGE)
    sh("ip", "-n", BRIDGE, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", BRIDGE, "link", "set", "br0", "up")
    # The bridge stands for the data centre's switches, which run no iptables: without
    # this the kernel's br_netfilter passes every bridged packet through the host's
    # iptables hooks (a sixth of the agents' CPU, charged to each sender).
    for t in ("iptables", "ip6tables", "arptables"):
        sh("ip", "netns", "exec", BRIDGE, "sysctl", "-q", f"net.bridge.bridge-nf-call-{t}=0", check=False)
    for k in range(1, n + 1):
        ns = f"{PRE}-a{k}"
        ns_add(ns)
        dev = f"{PRE}{k}"
        sh("ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", dev + "p", "netns", BRIDGE)
        sh("ip", "-n", BRIDGE, "link", "set", dev + "p", "master", "br0")
        sh("ip", "-n", BRIDGE, "link", "set", dev + "p", "up")
        sh("ip", "-n", ns, "addr", "add", addr(k) + "/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        if threaded:
            napi_threads(ns, dev)
            napi_threads(BRIDGE, dev + "p")


def start_agent(sonde, ns, bind, peers_file, rate, budget, extra=()):
    cmd = ["ip", "netns", "exec", ns, sonde, "serve", "--bind", bind, "--port", "5301",
           "--mesh", peers_file, "--mesh-port", "8620", "--mesh-rate", str(rate),
           "--mesh-budget", str(budget), "--metrics", f"{bind}:9464", *extra]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    p.stdout.readline()  # "sonde agent listening on ..."
    return p


def sonde_pid(p):
    """The sonde process under `ip netns exec` (exec'd: the same pid)."""
    return p.pid


def cpu_s(pid):
    """The process's CPU time in seconds: its threads' run time from schedstat, in ns (the
    stat file's ticks are 10 ms: 6 of them in a 60 s window at 0.1 % of a core), or the
    ticks where schedstat is missing. The agents' threads live as long as the agent."""
    try:
        ns = 0
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                ns += int(f.read().split()[0])
        return ns / 1e9
    except (FileNotFoundError, ProcessLookupError):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / N.HZ


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def scrape(ns, bind):
    out = sh("ip", "netns", "exec", ns, "python3", "-c",
             "import sys,urllib.request;print(urllib.request.urlopen(sys.argv[1],timeout=5).read().decode())",
             f"http://{bind}:9464/metrics", capture_output=True, text=True, check=False)
    return out.stdout


def total(text, family):
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(family + "{"))


def by_thread(pids):
    """Each thread name's run time in ns, summed over the agents (schedstat)."""
    out = {}
    for pid in pids:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/comm") as f:
                    name = f.read().strip()
                with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                    ns = int(f.read().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue
            out[name] = out.get(name, 0) + ns
    return out


def measure(pids, secs, threads=False):
    c0 = [cpu_s(p) for p in pids]
    t_0 = by_thread(pids) if threads else {}
    t0 = time.monotonic()
    time.sleep(secs)
    dt = time.monotonic() - t0
    cpu = [(cpu_s(p) - c) / dt * 100 for p, c in zip(pids, c0)]
    if threads:
        for name, ns in sorted(by_thread(pids).items()):
            share = (ns - t_0.get(name, 0)) / 1e9 / dt * 100 / len(pids)
            print(f"  thread {name}: {share:.4f} % of one core per agent")
    return cpu, [rss_mb(p) for p in pids]


def load():
    """The machine's load average over the last minute (other work skews CPU figures)."""
    return f"load average {os.getloadavg()[0]:.2f}"


def stats(xs):
    xs = sorted(xs)
    return f"min {xs[0]:.3f} median {xs[len(xs) // 2]:.3f} mean {sum(xs) / len(xs):.3f} max {xs[-1]:.3f}"


def mesh_run(a):
    neigh_room(a.agents * (a.agents - 1))
    up(a.agents, a.napi_threads)
    peers = f"/tmp/{PRE}-{os.getpid()}-peers"
    with open(peers, "w") as f:
        f.writelines(f"{addr(k)}\n" for k in range(1, a.agents + 1))
    atexit.register(lambda: os.path.exists(peers) and os.remove(peers))
    procs = [start_agent(a.sonde, f"{PRE}-a{k}", addr(k), peers, a.rate, 10 * a.rate * a.agents,
                         ("--label", f"rack=r{k % 4}", "--mesh-refresh", "5", *a.agent_arg))
             for k in range(1, a.agents + 1)]
    pids = [sonde_pid(p) for p in procs]
    try:
        time.sleep(a.warmup)
        text0 = scrape(f"{PRE}-a1", addr(1))
        sent0 = total(text0, "sonde_mesh_probes_sent_total")
        t0 = time.monotonic()
        kthreads = napi_pids()
        k0 = sum(cpu_s(p) for p in kthreads)
        cpu, rss = measure(pids, a.secs, a.threads)
        napi = (sum(cpu_s(p) for p in kthreads) - k0) / (time.monotonic() - t0) * 100
        sent1 = total(scrape(f"{PRE}-a1", addr(1)), "sonde_mesh_probes_sent_total")
        text = scrape(f"{PRE}-a1", addr(1))
        rate = (sent1 - sent0) / (time.monotonic() - t0)
        answered = total(text, "sonde_mesh_probes_answered_total")
        lost = total(text, "sonde_mesh_probes_lost_total")
        print(f"mesh: {a.agents} agents x {a.agents - 1} peers at {a.rate}/s per peer "
              f"(agent 1 sent {rate:.1f} probes/s; answered {answered:.0f}, lost {lost:.0f} so far; "
              f"in the window answered {answered - total(text0, 'sonde_mesh_probes_answered_total'):.0f}, "
              f"lost {lost - total(text0, 'sonde_mesh_probes_lost_total'):.0f})")
        print(f"  CPU % of one core per agent: {stats(cpu)}")
        rtts = total(text, "sonde_mesh_rtt_seconds_count") - total(text0, "sonde_mesh_rtt_seconds_count")
        if rtts > 0:
            rtt_s = total(text, "sonde_mesh_rtt_seconds_sum") - total(text0, "sonde_mesh_rtt_seconds_sum")
            print(f"  agent 1's round trips in the window: {rtts:.0f}, mean {rtt_s / rtts * 1e6:.1f} us")
        if a.napi_threads:
            print(f"  receive path in {len(kthreads)} NAPI threads: {napi / a.agents:.3f} % of one core per agent")
        print(f"  RSS MB per agent: {stats(rss)}; {load()}")
        if a.soak:
            soak(a, procs, pids, peers)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=10)
        down()


def soak(a, procs, pids, peers):
    """The mesh for --soak seconds while its list changes under it: every 30 s the file
    loses its last 10 agents or gets them back (read again every 5 s); each agent's RSS
    sampled then, and at the end agent 1's metrics must name exactly the listed peers."""
    print(f"soak: {a.soak:.0f} s, the list losing and regaining 10 agents every 30 s; RSS MB over agents")
    end, short = time.monotonic() + a.soak, False
    while time.monotonic() < end:
        time.sleep(min(30, max(0, end - time.monotonic())))
        short = not short
        listed = a.agents - 10 if short else a.agents
        with open(peers + ".new", "w") as f:
            f.writelines(f"{addr(k)}\n" for k in range(1, listed + 1))
        os.replace(peers + ".new", peers)
        r = [rss_mb(p) for p in pids]
        alive = sum(p.poll() is None for p in procs)
        print(f"  t+{a.soak - (end - time.monotonic()):.0f}s listed {listed} alive {alive}/{len(procs)} RSS {stats(r)}", flush=True)
    time.sleep(8)
    text = scrape(f"{PRE}-a1", addr(1))
    named = {l.split('destination="')[1].split('"')[0] for l in text.splitlines()
             if l.startswith("sonde_mesh_probes_sent_total{")}
    want = {addr(k) for k in range(2, (a.agents - 10 if short else a.agents) + 1)}
    print(f"  agent 1 names {len(named)} peers, the list {len(want)}: {'the same' if named == want else 'DIFFERENT'}")
    cpu, rss = measure(pids, 10)
    print(f"  after the soak: CPU % {stats(cpu)}; RSS MB {stats(rss)}")


def phantom_run(a, peers_n):
    ns, sink = f"{PRE}-p", f"{PRE}-sink"
    ns_add(ns)
    ns_add(sink)
    sh("ip", "link", "add", f"{PRE}p", "netns", ns, "type", "veth", "peer", "name", f"{PRE}s", "netns", sink)
    sh("ip", "-n", ns, "addr", "add", "198.18.7.1/24", "dev", f"{PRE}p")
    sh("ip", "-n", sink, "addr", "add", "198.18.7.2/24", "dev", f"{PRE}s")
    for n, d in ((ns, f"{PRE}p"), (sink, f"{PRE}s")):
        sh("ip", "-n", n, "link", "set", d, "up")
    sh("ip", "-n", ns, "route", "add", "198.19.0.0/16", "via", "198.18.7.2")
    # The sink drops what it is sent (no forwarding, no ICMP back).
    sh("ip", "netns", "exec", sink, "nft", "-f", "-", input=(
        "table inet sink {\n chain in {\n  type filter hook prerouting priority -300;\n"
        "  meta l4proto udp drop\n }\n}\n"), text=True)
    peers = f"/tmp/{PRE}-{os.getpid()}-phantom"
    with open(peers, "w") as f:
        f.writelines(f"198.19.{i // 250}.{i % 250 + 1}\n" for i in range(peers_n))
    rate = 0.1
    p = start_agent(a.sonde, ns, "198.18.7.1", peers, rate, rate * peers_n)
    try:
        time.sleep(a.phantom_warmup)
        cpu, rss = measure([p.pid], a.secs)
        text = scrape(ns, "198.18.7.1")
        print(f"phantom: 1 agent x {peers_n} peers at {rate}/s each ({rate * peers_n:.0f} probes/s, none answered; "
              f"lost so far {total(text, 'sonde_mesh_probes_lost_total'):.0f}): CPU {cpu[0]:.3f} % of one core, "
              f"{cpu[0] * 1e4 / (rate * peers_n):.1f} us per probe, RSS {rss[0]:.1f} MB; {load()}")
    finally:
        p.terminate()
        p.wait(timeout=10)
        os.remove(peers)
        down()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sonde", default=os.path.join(os.path.dirname(__file__), "../target/release/sonde"))
    ap.add_argument("--agents", type=int, default=50)
    ap.add_argument("--rate", type=float, default=1.0)
    ap.add_argument("--warmup", type=float, default=10)
    ap.add_argument("--secs", type=float, default=30)
    ap.add_argument("--phantom", default="1000,10000", help="peer counts of the one-agent runs (empty: none)")
    ap.add_argument("--phantom-warmup", type=float, default=25, help="a probe per peer every 10 s: past two rounds and the loss resolution")
    ap.add_argument("--no-mesh", action="store_true", help="only the phantom runs")
    ap.add_argument("--agent-arg", action="append", default=[],
                    help="one more argument for every agent of the mesh (repeat: --agent-arg=--mesh-follow-up=off)")
    ap.add_argument("--napi-threads", action="store_true",
                    help="every veth's receive path in NAPI kernel threads, as a NIC's softirq, not on the sender")
    ap.add_argument("--threads", action="store_true", help="each thread's CPU apart (by name)")
    ap.add_argument("--soak", type=float, default=0, help="seconds of soak after the mesh's measure")
    a = ap.parse_args()
    if not 2 <= a.agents <= 250:
        sys.exit("--agents: 2 to 250")
    if not a.no_mesh:
        mesh_run(a)
    for n in filter(None, a.phantom.split(",")):
        phantom_run(a, int(n))


if __name__ == "__main__":
    main()
