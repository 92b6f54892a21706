#!/usr/bin/env python3
"""sonde rpc -C 32 --stages on the kernel engine against the io_uring engine, and each
without --stages (what taking the stages costs each engine).

Alternating runs on one veth pair between two namespaces (198.18.0.1 -> 198.18.0.2), 64-byte
requests and responses, closed loop, the default workers. Prints each run, then the medians of
requests/s, P50 and P99, the split messages' share, and the ratio of io_uring to the kernel
engine with stages. Runs go into a scratch store, never the user's.

Usage (root): python3 bench/stages_engines.py [--runs 5] [--time 3]
Needs: iproute2, a release build of sonde.
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from netns import SERVER, namespaces, parse_args, rotations, rpc_end, start_server  # noqa: E402

FLOWS = 32


def rpc(sonde, t, extra):
    end = rpc_end(sonde, t, FLOWS, extra)
    lat = end["latency_ns"]
    stages = end.get("stages") or {}
    split = stages.get("split", 0) / max(lat["count"], 1)
    return end["requests_per_second"], lat["p50"] / 1e3, lat["p99"] / 1e3, split


def main():
    a = parse_args(5, 3)
    configs = {
        "kernel --stages": ["--engine", "kernel", "--stages"],
        "uring --stages": ["--engine", "uring", "--stages"],
        "kernel": ["--engine", "kernel"],
        "uring": ["--engine", "uring"],
    }
    with namespaces() as servers:
        servers["sonde"] = start_server([a.sonde, "serve", "--bind", SERVER, "--port", "5301"])
        got = {k: [] for k in configs}
        print(f"# {a.runs} alternating runs of {a.time} s, -C {FLOWS}, 64 B each way; {os.cpu_count()} CPUs")
        names = list(configs)
        for run in range(a.runs):
            for name in rotations(names, run):
                r = rpc(a.sonde, a.time, configs[name])
                got[name].append(r)
                print(f"run {run + 1} {name:16} {r[0]:10.0f} req/s  p50 {r[1]:7.0f} us  p99 {r[2]:7.0f} us"
                      f"  split {100 * r[3]:5.1f} %", flush=True)
                time.sleep(0.3)
        med = statistics.median
        m = {k: [med(x[i] for x in v) for i in range(4)] for k, v in got.items()}
        print("\n| configuration | requests/s (median) | P50 us | P99 us | messages split |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name in names:
            r, p50, p99, split = m[name]
            cell = f"{100 * split:.1f} %" if "stages" in name else "-"
            print(f"| {name} | {r:,.0f} | {p50:,.0f} | {p99:,.0f} | {cell} |")
        k, u = m["kernel --stages"], m["uring --stages"]
        print(f"\nwith --stages, uring / kernel: {u[0] / k[0]:.2f}x requests/s, P50 {u[1]:,.0f} vs {k[1]:,.0f} us")
        for e in ("kernel", "uring"):
            print(f"--stages on {e}: {m[e + ' --stages'][0] / m[e][0]:.2f}x the requests/s without")


if __name__ == "__main__":
    main()
