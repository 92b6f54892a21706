#!/usr/bin/env python3
"""AF_XDP against kernel sockets: `sonde pps --engine xdp` against sonde's kernel engine,
iperf2 and sockperf, 64-byte packets on the wire (22 bytes of UDP payload), on a veth pair
between two namespaces with --queues transmit and receive queues on each end.

Received packets/s: sonde's own receiver figure for sonde (its count agrees with the veth's
own counter, tests/suite/xdp_netns.rs), the delta of Udp InDatagrams in the receiving namespace
for the peers (the XDP path never reaches the UDP layer, so that counter cannot serve
both). CPU per packet: the agent's process CPU, and the whole host's busy CPU, per packet
received. Alternating runs, medians, ratios.

Usage (root): python3 bench/pps_xdp.py [--runs 5] [--time 3] [--queues 2]
"""

import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from netns import SERVER, SERVER_NS, alternate, client, in_datagrams, namespaces, parse_args, start_server  # noqa: E402

PAYLOAD = 22


def run_sonde(sonde, t, extra):
    argv = [sonde, "pps", SERVER, "--port", "5301", "-t", str(t), "--warmup", "0.5", "--json", "--no-save", *extra]
    doc = json.loads(client(argv))
    rx = doc["end"]["packets"]["receiver"]
    host = doc["end"]["one_host"]["cpu"]
    packets = max(rx["packets"], 1)
    host_cpu_s = (100 - host["host"]["idle_percent"]) / 100 * host["cpus"] * rx["seconds"]
    return rx["packets_per_second"], rx["cpu"]["process_cpu_s"] / packets * 1e9, host_cpu_s / packets * 1e9


def run_peer(argv, t):
    before = in_datagrams()
    client(argv)
    return (in_datagrams() - before) / t, None, None


def pps_table(runs, column):
    """Prints the table of `runs` (name: each run's (packets/s, agent CPU ns/packet, host CPU
    ns/packet), a CPU figure None where it was not read), `column` naming the first column;
    the median packets/s of each."""
    print(f"| {column} | median received packets/s | agent CPU ns/packet | host CPU ns/packet | runs |")
    print("| --- | ---: | ---: | ---: | --- |")
    med = {}
    for name, rs in runs.items():
        med[name] = statistics.median(r[0] for r in rs)
        cpu = [statistics.median(r[i] for r in rs) if rs[0][i] is not None else None for i in (1, 2)]
        cells = [f"{c:,.0f}" if c is not None else "-" for c in cpu]
        print(f"| {name} | {med[name]:,.0f} | {cells[0]} | {cells[1]} | " + ", ".join(f"{r[0]/1e3:.0f}k" for r in rs) + " |")
    return med


def main():
    a = parse_args(5, 3, ("--queues", dict(type=int, default=os.cpu_count())))
    s, t = a.sonde, a.time
    xdp = ["--engine", "xdp"]
    tools = {
        "sonde xdp (defaults)": lambda: run_sonde(s, t, xdp),
        "sonde xdp --tx-threads 1": lambda: run_sonde(s, t, [*xdp, "--tx-threads", "1"]),
        "sonde xdp --poll busy": lambda: run_sonde(s, t, [*xdp, "--poll", "busy"]),
        "sonde xdp --poll hybrid": lambda: run_sonde(s, t, [*xdp, "--poll", "hybrid"]),
        "sonde kernel (defaults)": lambda: run_sonde(s, t, []),
        "sonde kernel --tx-threads 1 --flows 1": lambda: run_sonde(s, t, ["--tx-threads", "1", "--flows", "1"]),
        "iperf2 -u -l 22 -b 10G -P 2": lambda: run_peer(["iperf", "-c", SERVER, "-p", "5001", "-u", "-l", str(PAYLOAD), "-b", "10G", "-t", str(t), "-P", "2"], t),
        "sockperf throughput -m 22": lambda: run_peer(["sockperf", "throughput", "-i", SERVER, "-p", "11111", "-m", str(PAYLOAD), "-t", str(t), "--mps", "max"], t),
    }
    with namespaces(a.queues) as servers:
        servers["sonde"] = start_server([s, "serve", "--bind", SERVER, "--port", "5301", "--allow", "xdp"])
        servers["iperf2"] = start_server(["iperf", "-s", "-u", "-p", "5001", "-l", "2048"])
        servers["sockperf"] = start_server(["sockperf", "server", "-i", SERVER, "-p", "11111"])
        runs = alternate(tools, a.runs)
    print(f"# {a.runs} alternating runs of {t} s; 64-byte packets; veth with {a.queues} queue(s) a side; {os.cpu_count()} CPUs")
    med = pps_table(runs, "tool")
    best_peer = max(v for k, v in med.items() if not k.startswith("sonde"))
    x = med["sonde xdp (defaults)"]
    print(f"\nxdp / best kernel-socket peer: {x / best_peer:.2f}")
    print(f"xdp / sonde kernel, defaults: {x / med['sonde kernel (defaults)']:.2f}")
    print(f"xdp / sonde kernel, one sending thread: {med['sonde xdp --tx-threads 1'] / med['sonde kernel --tx-threads 1 --flows 1']:.2f}")


if __name__ == "__main__":
    main()
