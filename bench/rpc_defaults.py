#!/usr/bin/env python3
"""sonde rpc -C 32 with its default workers against neper tcp_rr at the same flow count.

Alternating runs on one veth pair between two namespaces (198.18.0.1 -> 198.18.0.2), 64-byte
requests and responses, closed loop. Configurations:
  sonde           `sonde rpc -C 32` with nothing else (its defaults choose the engine, io_uring,
                  and the workers)
  sonde-kernel    the same on the kernel engine (`--engine kernel`: a system call a send and
                  a receive, epoll)
  sonde-uring-T1  the default engine with one worker on each side
  neper-T1/T2   neper tcp_rr -F 32 -T 1 or 2, server with the same -T
Prints each run, then medians of requests/s and P99 and the ratio of sonde's defaults to the
best neper. Runs go into a scratch store, never the user's.

Usage (root): python3 bench/rpc_defaults.py [--runs 7] [--time 3] [--neper DIR]
Needs: iproute2, a release build of sonde, neper built from its source (make tcp_rr).
"""

import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from netns import SERVER, client, namespaces, parse_args, rotations, rpc_end, start_server  # noqa: E402

FLOWS = 32


def sonde_rpc(sonde, t, extra):
    end = rpc_end(sonde, t, FLOWS, extra)
    return end["requests_per_second"], end["latency_ns"]["p99"] / 1e3


def neper_rr(neper, t, threads, port):
    """neper's server serves one client and exits, so each run starts its own."""
    server = start_server([os.path.join(neper, "tcp_rr"), "-T", str(threads), "-F", str(FLOWS), "-Q", "64",
                           "-R", "64", "-P", str(port), "-C", str(port - 1), "--suicide-length", str(t + 30),
                           "--nolog"])
    argv = [os.path.join(neper, "tcp_rr"), "-c", "-H", SERVER, "-P", str(port), "-C", str(port - 1),
            "-T", str(threads), "-F", str(FLOWS), "-Q", "64", "-R", "64", "-l", str(t), "-p", "99", "--nolog"]
    kv = dict(re.findall(r"^(\w+)=(.*)$", client(argv), re.M))
    server.wait(timeout=30)
    return float(kv["throughput"]), float(kv["latency_p99"]) * 1e6


def main():
    a = parse_args(7, 3, ("--neper", {"default": "/tmp/neper"}))
    sonde = a.sonde
    if not os.access(os.path.join(a.neper, "tcp_rr"), os.X_OK):
        sys.exit(f"--neper {a.neper}: no tcp_rr there; build neper from its source (make tcp_rr)")
    with namespaces() as servers:
        servers["sonde"] = start_server([sonde, "serve", "--bind", SERVER, "--port", "5301"])
        runners = {
            "sonde": lambda: sonde_rpc(sonde, a.time, []),
            "sonde-kernel": lambda: sonde_rpc(sonde, a.time, ["--engine", "kernel"]),
            "sonde-uring-T1": lambda: sonde_rpc(sonde, a.time, ["--threads", "1", "--server-threads", "1"]),
            "neper-T1": lambda: neper_rr(a.neper, a.time, 1, 12867),
            "neper-T2": lambda: neper_rr(a.neper, a.time, 2, 12869),
        }
        rate = {k: [] for k in runners}
        p99 = {k: [] for k in runners}
        print(f"# {a.runs} alternating runs of {a.time} s, -C/-F {FLOWS}, 64 B each way; {os.cpu_count()} CPUs")
        names = list(runners)
        for run in range(a.runs):
            for name in rotations(names, run):
                r, p = runners[name]()
                rate[name].append(r)
                p99[name].append(p)
                print(f"run {run + 1} {name:10} {r:10.0f} req/s  p99 {p:8.0f} us", flush=True)
                time.sleep(0.3)
        med = statistics.median
        print("\n| configuration | requests/s (median) | P99 us (median) |")
        print("| --- | ---: | ---: |")
        for name in names:
            print(f"| {name} | {med(rate[name]):,.0f} | {med(p99[name]):,.0f} |")
        best = max((n for n in names if n.startswith("neper")), key=lambda n: med(rate[n]))
        print(f"\nsonde defaults / {best}: {med(rate['sonde']) / med(rate[best]):.2f}x requests/s, "
              f"P99 {med(p99['sonde']):,.0f} vs {med(p99[best]):,.0f} us")
        print(f"sonde defaults (uring) / sonde-kernel: {med(rate['sonde']) / med(rate['sonde-kernel']):.2f}x "
              f"requests/s, P99 {med(p99['sonde']):,.0f} vs {med(p99['sonde-kernel']):,.0f} us")


if __name__ == "__main__":
    main()
