#!/usr/bin/env python3
"""Small-packet rate: sonde pps vs iperf2 (UDP) vs sockperf throughput mode, 64-byte
packets on the wire (22 bytes of UDP payload), on a veth pair between two namespaces.

Every tool's received rate is read the same way: the delta of Udp InDatagrams in the
receiving namespace's /proc/net/snmp (datagrams the kernel delivered to a socket) over the
time the sender sent. Alternating runs, medians, and the ratio of sonde to the best peer.

Usage (root): python3 bench/pps_compare.py [--runs 5] [--time 4]
"""

import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from netns import SERVER, SERVER_NS, client, in_datagrams, namespaces, parse_args, rotations, start_server# noqa: E402

PAYLOAD = 22


def run_sonde(sonde, t, extra):
    argv = [sonde, "pps", SERVER, "--port", "5301", "-t", str(t), "--warmup", "0.5", "--json", "--no-save", *extra]
    doc = json.loads(client(argv))
    return doc, t + 0.5


def run_iperf2(t, parallel=1):
    client(["iperf", "-c", SERVER, "-p", "5001", "-u", "-l", str(PAYLOAD), "-b", "10G", "-t", str(t), "-P", str(parallel)])
    return None, t


def run_sockperf(t):
    client(["sockperf", "throughput", "-i", SERVER, "-p", "11111", "-m", str(PAYLOAD), "-t", str(t), "--mps", "max"])
    return None, t


def main():
    a = parse_args(5, 4)
    sonde = a.sonde
    with namespaces() as servers:
        servers["sonde"] = start_server([sonde, "serve", "--bind", SERVER, "--port", "5301"])
        servers["iperf2"] = start_server(["iperf", "-s", "-u", "-p", "5001", "-l", "2048"])
        servers["sockperf"] = start_server(["sockperf", "server", "-i", SERVER, "-p", "11111"])
        tools = {
            "sonde (defaults)": lambda: run_sonde(sonde, a.time, []),
            "sonde --flows 1 (one sending thread)": lambda: run_sonde(sonde, a.time, ["--flows", "1"]),
            "sonde --gso (defaults otherwise)": lambda: run_sonde(sonde, a.time, ["--gso"]),
            "iperf2 -u -l 22 -b 10G": lambda: run_iperf2(a.time),
            "iperf2 -u -l 22 -b 10G -P 2": lambda: run_iperf2(a.time, 2),
            "sockperf throughput -m 22": lambda: run_sockperf(a.time),
        }
        rates = {k: [] for k in tools}
        own = []
        for run in range(a.runs):
            names = list(tools)
            order = rotations(names, run)
            for name in order:
                before = in_datagrams()
                doc, secs = tools[name]()
                rates[name].append((in_datagrams() - before) / secs)
                if doc is not None and name == "sonde (defaults)":
                    own.append(doc["end"]["packets"]["receiver"]["packets_per_second"])
                time.sleep(0.5)
        print(f"# {a.runs} alternating runs of {a.time} s; 64-byte packets (22 B payload); {os.cpu_count()} CPUs")
        print("| tool | median received packets/s | runs |")
        print("| --- | ---: | --- |")
        med = {k: statistics.median(v) for k, v in rates.items()}
        for k, v in rates.items():
            print(f"| {k} | {med[k]:,.0f} | " + ", ".join(f"{x/1e3:.0f}k" for x in v) + " |")
        peers = [v for k, v in med.items() if not k.startswith("sonde")]
        best_peer = max(peers)
        print(f"\nsonde defaults / best peer: {med['sonde (defaults)'] / best_peer:.2f}")
        print(f"sonde --gso / best peer: {med['sonde --gso (defaults otherwise)'] / best_peer:.2f}")
        if own:
            print(f"sonde's own receiver figure (window only), median: {statistics.median(own):,.0f} packets/s")


if __name__ == "__main__":
    main()
