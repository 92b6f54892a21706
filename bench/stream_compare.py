#!/usr/bin/env python3
"""Side-by-side TCP throughput benchmark: sonde stream vs iperf3 vs iperf2.

Builds two network namespaces joined by a veth pair (198.18.0.1 -> 198.18.0.2), starts
each tool's server in one, and runs the clients from the other in alternating order, so
that every tool sees the same machine state. Prints medians and the ratio of sonde to the
best peer, for throughput and for CPU seconds per GB (both sides, measured the same way
for every tool: the client's rusage, the server process's /proc/PID/stat delta).

Usage (root): python3 bench/stream_compare.py [--runs 5] [--time 5] [--conns 1,8]
Needs: iproute2, iperf3, iperf (Debian packages), a release build of sonde.
"""

import json
import os
import statistics
import time

from netns import SERVER, children_cpu_s, client, namespaces, parse_args, proc_cpu_s, rotations, start_server


def run_sonde(sonde, p, t, port):
    out = client([sonde, "stream", SERVER, "--port", str(port), "-P", str(p), "-t", str(t), "--warmup", "1", "--json"])
    end = json.loads(out)["end"]
    return end["receiver"]["bits_per_second"], t + 1.5


def run_iperf3(p, t):
    out = client(["iperf3", "-c", SERVER, "-P", str(p), "-t", str(t), "-O", "1", "-J"])
    return json.loads(out)["end"]["sum_received"]["bits_per_second"], t + 1


def run_iperf2(p, t):
    out = client(["iperf", "-c", SERVER, "-P", str(p), "-t", str(t), "-y", "C"])
    lines = [l.split(",") for l in out.strip().splitlines()]
    # A sum line (id -1) when iperf2 prints one, else the sum of the per-stream lines.
    total = [l for l in lines if l[5] == "-1"]
    if total:
        return float(total[-1][8]), t
    return sum(float(l[8]) for l in lines), t


def main():
    a = parse_args(5, 5, ("--conns", {"default": "1,8"}))
    sonde = a.sonde
    with namespaces() as servers:
        servers["sonde"] = start_server([sonde, "serve", "--bind", SERVER, "--port", "5301"])
        servers["iperf3"] = start_server(["iperf3", "-s", "-p", "5201"])
        servers["iperf2"] = start_server(["iperf", "-s", "-p", "5001"])
        runners = {
            "sonde": lambda p: run_sonde(sonde, p, a.time, 5301),
            "iperf3": lambda p: run_iperf3(p, a.time),
            "iperf2": lambda p: run_iperf2(p, a.time),
        }
        print(f"# {a.runs} alternating runs of {a.time} s per tool; veth between two namespaces; {os.cpu_count()} CPUs")
        for p in [int(x) for x in a.conns.split(",")]:
            rates = {k: [] for k in runners}
            cpu_per_gb = {k: [] for k in runners}
            for run in range(a.runs):
                order = rotations(list(runners), run)
                for name in order:
                    spid = servers[name].pid
                    s0, c0 = proc_cpu_s(spid), children_cpu_s()
                    bps, wall_s = runners[name](p)
                    cpu = proc_cpu_s(spid) - s0 + children_cpu_s() - c0
                    gb = bps * wall_s / 8 / 1e9
                    rates[name].append(bps)
                    cpu_per_gb[name].append(cpu / gb if gb else float("nan"))
                    time.sleep(0.5)
            med = {k: statistics.median(v) for k, v in rates.items()}
            cpu = {k: statistics.median(v) for k, v in cpu_per_gb.items()}
            best_rate = max(med["iperf3"], med["iperf2"])
            best_cpu = min(cpu["iperf3"], cpu["iperf2"])
            print(f"\n## -P {p}")
            print("| tool | median Gbit/s | runs (Gbit/s) | median CPU s/GB |")
            print("| --- | ---: | --- | ---: |")
            for k in runners:
                runs = ", ".join(f"{r/1e9:.1f}" for r in rates[k])
                print(f"| {k} | {med[k]/1e9:.2f} | {runs} | {cpu[k]:.3f} |")
            print(f"\nsonde / best peer: throughput {med['sonde']/best_rate:.3f}, CPU s per GB {cpu['sonde']/best_cpu:.3f}")


if __name__ == "__main__":
    main()
