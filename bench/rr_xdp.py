#!/usr/bin/env python3
"""Request/response over AF_XDP against kernel sockets, on a veth pair between two
namespaces, at identical placement (the agent on CPU 1, the controller on CPU 0), in
alternating runs; medians and ratios.

1. ping, 64-byte UDP messages: round-trip P50 and P99.9 of `--engine xdp` against the
   kernel engine's `--udp`, each with `--poll busy` (the issue's comparison) and block.
2. rpc closed loop, 64 B each way, one flow with 32 in flight: requests/s of `--engine
   xdp` against the kernel engine over TCP (its default) and over UDP; and msg_gen's job
   (-C 4 -W 32 -m 1024).
3. Receive modes at a fixed 20,000 messages/s (ping --rate): CPU microseconds per message
   on each side for block, busy and hybrid, both engines.

Usage (root): python3 bench/rr_xdp.py [--runs 5] [--time 3] [--only ping|rpc|modes]
"""

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from netns import SERVER, client, namespaces, parse_args, rotations, start_server  # noqa: E402

SERVER_CPU, CLIENT_CPU = 1, 0
KERNEL_UDP = ["--engine", "kernel", "--udp"]
XDP = ["--engine", "xdp"]


def sonde(binary, t, test, extra):
    argv = [binary, test, SERVER, "--port", "5301", "-t", str(t), "--warmup", "1", "--json", "--no-save", *extra]
    return json.loads(client(argv, CLIENT_CPU))["end"]


def latency(end):
    lat = end["latency_ns"]
    return lat["p50"] / 1e3, lat["p999"] / 1e3


def run_jobs(jobs, runs, measure):
    """Each job once per run, the order rotating from run to run; `measure` of each end."""
    got = {name: [] for name in jobs}
    for run in range(runs):
        for name in rotations(list(jobs), run):
            got[name].append(measure(jobs[name]()))
            time.sleep(0.3)
    return got


def med(rows, i):
    return statistics.median(r[i] for r in rows)


def main():
    a = parse_args(5, 3, ("--only", dict(choices=["ping", "rpc", "modes"])))
    want = lambda part: a.only in (None, part)  # noqa: E731
    s, t = a.sonde, a.time
    with namespaces() as servers:
        servers["sonde"] = start_server([s, "serve", "--bind", SERVER, "--port", "5301", "--allow", "xdp"], SERVER_CPU)
        print(f"# {a.runs} alternating runs of {t} s; agent on CPU {SERVER_CPU}, controller on CPU {CLIENT_CPU}; {os.cpu_count()} CPUs")

        if want("ping"):
            ping_section(s, t, a.runs)
        if want("rpc"):
            rpc_section(s, t, a.runs)
        if want("modes"):
            modes_section(s, t, max(1, a.runs // 2))


def ping_section(s, t, runs):
    print("\n## ping, 64 B over UDP (round-trip time, us)")
    pings = {
        f"{engine} --poll {poll}": (lambda e=flags, p=poll: sonde(s, t, "ping", [*e, "--poll", p]))
        for poll in ("busy", "block")
        for engine, flags in (("kernel --udp", KERNEL_UDP), ("xdp", XDP))
    }
    got = run_jobs(pings, runs, latency)
    print("| engine, receive mode | p50 | p99.9 | runs (p50) |")
    print("| --- | ---: | ---: | --- |")
    for name, rows in got.items():
        print(f"| {name} | {med(rows, 0):.2f} | {med(rows, 1):.2f} | " + ", ".join(f"{r[0]:.1f}" for r in rows) + " |")
    for poll in ("busy", "block"):
        ratio = med(got[f"xdp --poll {poll}"], 0) / med(got[f"kernel --udp --poll {poll}"], 0)
        print(f"\nxdp / kernel UDP, P50, --poll {poll}: {ratio:.2f}")



def rpc_section(s, t, runs):
    print("\n## rpc requests/s (closed loop, block)")
    rpcs = {
        "kernel TCP -W 32": ["--engine", "kernel", "-W", "32"],
        "kernel --udp -W 32": [*KERNEL_UDP, "-W", "32"],
        "xdp -W 32": [*XDP, "-W", "32"],
        "kernel --udp -C 4 -W 32 -m 1024": [*KERNEL_UDP, "-C", "4", "-W", "32", "-m", "1024"],
        "xdp -C 4 -W 32 -m 1024": [*XDP, "-C", "4", "-W", "32", "-m", "1024"],
    }
    jobs = {name: (lambda f=flags: sonde(s, t, "rpc", f)) for name, flags in rpcs.items()}
    got = run_jobs(jobs, runs, lambda e: (e["requests_per_second"], *latency(e)))
    print("| job | requests/s | p50 us | p99.9 us | runs |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, rows in got.items():
        print(f"| {name} | {med(rows, 0):,.0f} | {med(rows, 1):.1f} | {med(rows, 2):.1f} | " + ", ".join(f"{r[0]/1e3:.0f}k" for r in rows) + " |")
    x = med(got["xdp -W 32"], 0)
    print(f"\nxdp / kernel TCP, -W 32: {x / med(got['kernel TCP -W 32'], 0):.2f}")
    print(f"xdp / kernel UDP, -W 32: {x / med(got['kernel --udp -W 32'], 0):.2f}")
    print(f"xdp / kernel UDP, -C 4 -W 32 -m 1024: {med(got['xdp -C 4 -W 32 -m 1024'], 0) / med(got['kernel --udp -C 4 -W 32 -m 1024'], 0):.2f}")



def modes_section(s, t, runs):
    print("\n## receive modes at 20,000 messages/s (ping --rate 20000, 64 B UDP)")
    modes = {
        f"{engine} {poll}": (lambda e=flags, p=poll: sonde(s, t, "ping", [*e, "--rate", "20000", "--poll", p]))
        for engine, flags in (("kernel --udp", KERNEL_UDP), ("xdp", XDP))
        for poll in ("block", "busy", "hybrid")
    }
    got = run_jobs(modes, runs, lambda e: (*latency(e), e["client"]["cpu_us_per_message"], e["server"]["cpu_us_per_message"]))
    print("| engine, receive mode | p50 us | p99.9 us | client CPU us/msg | agent CPU us/msg |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, rows in got.items():
        print(f"| {name} | {med(rows, 0):.2f} | {med(rows, 1):.2f} | {med(rows, 2):.2f} | {med(rows, 3):.2f} |")


if __name__ == "__main__":
    main()
