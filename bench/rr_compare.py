#!/usr/bin/env python3
"""Request/response benchmarks on a veth pair between two namespaces.

1. Round-trip tail: sonde ping against sockperf ping-pong and neper tcp_rr/udp_rr (one flow,
   --nolog), TCP and UDP, 64-byte messages, alternating runs at identical placement (servers
   on CPU 1, clients on CPU 0): medians of P50, P99, P99.9, P99.99 and max of each, and
   sonde's ratios to sockperf's (of the medians, and the median of each run's ratio to the
   sockperf run beside it). sockperf runs with --full-rtt so that both report round
   trips; neper reports its own percentiles (-p). `--variant NAME=ARGS` adds a sonde run
   with extra flags, `--variant NAME=@BINARY` another build: the A/B of one suspect at a time.
2. sonde rpc: requests/s for W = 1, 8, 32 and C = 1, 8 (closed loop, block mode).
3. Receive modes at a low rate (ping --rate 2000): CPU microseconds per message on both
   sides for block, busy and hybrid, next to their latency.

Usage (root): python3 bench/rr_compare.py [--runs 7] [--time 3] [--only tail] [--neper DIR]
              [--transports tcp,udp] [--variant 'i10=-i 10' ...]
Needs: iproute2, sockperf (Debian package), a release build of sonde; neper built from its
source (make tcp_rr udp_rr) for its rows, which are left out when --neper has none.
"""

import json
import os
import re
import shlex
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from netns import SERVER, client, namespaces, parse_args, rotations, start_server  # noqa: E402

SERVER_CPU, CLIENT_CPU = 1, 0
KEYS = ("p50", "p99", "p999", "p9999", "max")


def sonde_ping(sonde, t, udp, extra=(), port=5301):
    """The client's round trips in microseconds, by KEYS, and its whole `end`."""
    argv = [sonde, "ping", SERVER, "--port", str(port), "-t", str(t), "--warmup", "1", "--json", "--no-save", *extra]
    if udp:
        argv.append("--udp")
    end = json.loads(client(argv, CLIENT_CPU))["end"]
    lat = end["latency_ns"]
    return {k: lat[k] / 1e3 for k in KEYS}, end


def sockperf_ping(t, udp):
    argv = ["sockperf", "ping-pong", "-i", SERVER, "-p", "11111" if udp else "11112", "-t", str(t), "-m", "64",
            "--full-rtt"]
    if not udp:
        argv.append("--tcp")
    out = client(argv, CLIENT_CPU)
    pct = {m.group(1): float(m.group(2)) for m in re.finditer(r"percentile\s+([\d.]+)\s+=\s+([\d.]+)", out)}
    top = float(re.search(r"<MAX> observation\s+=\s+([\d.]+)", out).group(1))
    return {"p50": pct["50.000"], "p99": pct["99.000"], "p999": pct["99.900"], "p9999": pct["99.990"], "max": top}


def neper_ping(neper, t, udp, port):
    """neper's server serves one client and exits, so each run starts its own."""
    tool = os.path.join(neper, "udp_rr" if udp else "tcp_rr")
    common = ["-P", str(port), "-C", str(port - 1), "-Q", "64", "-R", "64", "--nolog"]
    server = start_server([tool, *common, "--suicide-length", str(t + 30)], SERVER_CPU)
    argv = [tool, "-c", "-H", SERVER, *common, "-l", str(t), "-p", "50,99,99.9,99.99,100"]
    kv = dict(re.findall(r"^([\w.]+)=(.*)$", client(argv, CLIENT_CPU), re.M))
    server.wait(timeout=30)
    us = lambda key: float(kv[key]) * 1e6  # noqa: E731 (neper prints seconds)
    return {"p50": us("latency_p50"), "p99": us("latency_p99"), "p999": us("latency_p99.9"),
            "p9999": us("latency_p99.99"), "max": us("latency_max")}


def variants(specs, sonde):
    """"sonde" and each `NAME=ARGS` (extra sonde flags) or `NAME=@BINARY` (another build,
    with its own agent on the next port) -> (binary, flags, agent port)."""
    out = {"sonde": (sonde, [], 5301)}
    for spec in specs:
        name, _, what = spec.partition("=")
        if what.startswith("@"):
            out[f"sonde-{name}"] = (os.path.abspath(what[1:]), [], 5301 + len(out))
        else:
            out[f"sonde-{name}"] = (sonde, shlex.split(what), 5301)
    return out


def tail(a, neper):
    runs = variants(a.variant, a.sonde)
    print("\n## ping vs sockperf ping-pong and neper (round-trip time, us; medians)")
    print("| transport | tool | P50 | P99 | P99.9 | P99.99 | max | P50 / sockperf | P99.9 / sockperf |"
          " paired P50 | paired P99.9 |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for udp in (False, True):
        if ("udp" if udp else "tcp") not in a.transports.split(","):
            continue
        tools = {name: (lambda b=b, f=f, p=p: sonde_ping(b, a.time, udp, f, p)[0]) for name, (b, f, p) in runs.items()}
        tools["sockperf"] = lambda: sockperf_ping(a.time, udp)
        if neper:
            tools["neper"] = lambda: neper_ping(neper, a.time, udp, 12867)
        got = {name: [] for name in tools}
        for run in range(a.runs):
            for name in rotations(list(tools), run):
                got[name].append(tools[name]())
                time.sleep(0.3)
        med = {name: {k: statistics.median(r[k] for r in rows) for k in KEYS} for name, rows in got.items()}
        # Each run's tools ran seconds apart on the same machine: the median of their paired
        # ratios is steadier than the ratio of medians when the machine's tail drifts.
        paired = {name: {k: statistics.median(r[k] / s[k] for r, s in zip(rows, got["sockperf"])) for k in KEYS}
                  for name, rows in got.items()}
        for name, m in med.items():
            ratio = lambda k: m[k] / med["sockperf"][k]  # noqa: E731
            print(f"| {'UDP' if udp else 'TCP'} | {name} | " + " | ".join(f"{m[k]:.1f}" for k in KEYS)
                  + f" | {ratio('p50'):.3f} | {ratio('p999'):.3f} | {paired[name]['p50']:.3f}"
                  f" | {paired[name]['p999']:.3f} |", flush=True)
        if a.verbose:
            for name, rows in got.items():
                by_run = ", ".join(f"{r['p999']:.0f}" for r in rows)
                print(f"<!-- {name} P99.9 by run: {by_run} -->")


def rpc_rates(a):
    print("\n## rpc requests/s (closed loop, block, 64 B each way; median of runs)")
    print("| connections | W=1 | W=8 | W=32 |")
    print("| ---: | ---: | ---: | ---: |")
    for c in (1, 8):
        row = []
        for w in (1, 8, 32):
            rates = []
            for _ in range(max(1, a.runs // 2)):
                out = client([a.sonde, "rpc", SERVER, "--port", "5301", "-C", str(c), "-W", str(w), "-t", str(a.time),
                              "--warmup", "1", "--json", "--no-save"])
                rates.append(json.loads(out)["end"]["requests_per_second"])
            row.append(statistics.median(rates))
        print(f"| {c} | " + " | ".join(f"{r:,.0f}" for r in row) + " |")


def receive_modes(a):
    print("\n## receive modes at 2000 messages/s (TCP ping, same placement)")
    print("| poll | p50 us | p99.9 us | client CPU us/msg | server CPU us/msg |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for mode in ("block", "busy", "hybrid=50us"):
        rows = []
        for _ in range(max(1, a.runs // 2)):
            lat, end = sonde_ping(a.sonde, a.time, False, ["--rate", "2000", "--poll", mode])
            rows.append((lat["p50"], lat["p999"], end["client"]["cpu_us_per_message"],
                         end["server"]["cpu_us_per_message"]))
        med = [statistics.median(col) for col in zip(*rows)]
        print(f"| {mode} | {med[0]:.2f} | {med[1]:.2f} | {med[2]:.2f} | {med[3]:.2f} |")


def main():
    a = parse_args(7, 3, ("--neper", {"default": "/tmp/neper"}),
                   ("--only", {"choices": ["tail", "rpc", "modes"], "default": None}),
                   ("--transports", {"default": "tcp,udp"}),
                   ("--variant", {"action": "append", "default": []}),
                   ("--verbose", {"action": "store_true"}))
    neper = a.neper if os.access(os.path.join(a.neper, "tcp_rr"), os.X_OK) else None
    if neper is None:
        print(f"# --neper {a.neper}: no tcp_rr there, neper's rows left out (make tcp_rr udp_rr)")
    with namespaces() as servers:
        for name, (binary, _, port) in variants(a.variant, a.sonde).items():
            if name == "sonde" or binary != a.sonde:
                servers[name] = start_server([binary, "serve", "--bind", SERVER, "--port", str(port)], SERVER_CPU)
        servers["sockperf-udp"] = start_server(["sockperf", "server", "-i", SERVER, "-p", "11111"], SERVER_CPU)
        servers["sockperf-tcp"] = start_server(["sockperf", "server", "-i", SERVER, "-p", "11112", "--tcp"],
                                               SERVER_CPU)
        print(f"# {a.runs} alternating runs of {a.time} s; servers on CPU {SERVER_CPU}, clients on CPU {CLIENT_CPU};"
              f" {os.cpu_count()} CPUs")
        if a.only in (None, "tail"):
            tail(a, neper)
        if a.only in (None, "rpc"):
            rpc_rates(a)
        if a.only in (None, "modes"):
            receive_modes(a)


if __name__ == "__main__":
    main()
