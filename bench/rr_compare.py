#!/usr/bin/env python3
"""Request/response benchmarks on a veth pair between two namespaces.

1. sonde ping vs sockperf ping-pong, TCP and UDP, 64-byte messages, alternating runs at
   identical placement (servers on CPU 1, clients on CPU 0): median round-trip P50 and
   P99.9 of each (sockperf with --full-rtt, so both report round-trip times) and ratios.
2. sonde rpc: requests/s for W = 1, 8, 32 and C = 1, 8 (closed loop, block mode).
3. Receive modes at a low rate (ping --rate 2000): CPU microseconds per message on both
   sides for block, busy and hybrid, next to their latency.

Usage (root): python3 bench/rr_compare.py [--runs 5] [--time 4]
Needs: iproute2, sockperf (Debian package), a release build of sonde.
"""

import json
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from netns import SERVER, client, namespaces, parse_args, rotations, start_server# noqa: E402

SERVER_CPU, CLIENT_CPU = 1, 0


def sonde_ping(sonde, t, udp, extra=()):
    argv = [sonde, "ping", SERVER, "--port", "5301", "-t", str(t), "--warmup", "1", "--json", "--no-save", *extra]
    if udp:
        argv.append("--udp")
    end = json.loads(client(argv, CLIENT_CPU))["end"]
    return end


def sockperf_ping(t, udp):
    argv = ["sockperf", "ping-pong", "-i", SERVER, "-p", "11111" if udp else "11112", "-t", str(t), "-m", "64", "--full-rtt"]
    if not udp:
        argv.append("--tcp")
    out = client(argv, CLIENT_CPU)
    pct = {m.group(1): float(m.group(2)) for m in re.finditer(r"percentile\s+([\d.]+)\s+=\s+([\d.]+)", out)}
    return pct["50.000"], pct["99.900"]


def main():
    a = parse_args(5, 4)
    sonde = a.sonde
    with namespaces() as servers:
        servers["sonde"] = start_server([sonde, "serve", "--bind", SERVER, "--port", "5301"], SERVER_CPU)
        servers["sockperf-udp"] = start_server(["sockperf", "server", "-i", SERVER, "-p", "11111"], SERVER_CPU)
        servers["sockperf-tcp"] = start_server(["sockperf", "server", "-i", SERVER, "-p", "11112", "--tcp"], SERVER_CPU)
        print(f"# {a.runs} alternating runs of {a.time} s; servers on CPU {SERVER_CPU}, clients on CPU {CLIENT_CPU}; {os.cpu_count()} CPUs")
        print("\n## ping vs sockperf ping-pong (round-trip time, us)")
        print("| transport | sonde p50 | sockperf p50 | ratio | sonde p99.9 | sockperf p99.9 | ratio |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for udp in (False, True):
            s50, s999, k50, k999 = [], [], [], []
            for run in range(a.runs):
                steps = ["sonde", "sockperf"] if run % 2 == 0 else ["sockperf", "sonde"]
                for tool in steps:
                    if tool == "sonde":
                        lat = sonde_ping(sonde, a.time, udp)["latency_ns"]
                        s50.append(lat["p50"] / 1e3)
                        s999.append(lat["p999"] / 1e3)
                    else:
                        p50, p999 = sockperf_ping(a.time, udp)
                        k50.append(p50)
                        k999.append(p999)
                    time.sleep(0.3)
            m = statistics.median
            print(f"| {'UDP' if udp else 'TCP'} | {m(s50):.2f} | {m(k50):.2f} | {m(s50)/m(k50):.3f} | {m(s999):.2f} | {m(k999):.2f} | {m(s999)/m(k999):.3f} |")

        print("\n## rpc requests/s (closed loop, block, 64 B each way; median of runs)")
        print("| connections | W=1 | W=8 | W=32 |")
        print("| ---: | ---: | ---: | ---: |")
        for c in (1, 8):
            row = []
            for w in (1, 8, 32):
                rates = []
                for _ in range(max(1, a.runs // 2)):
                    out = client([sonde, "rpc", SERVER, "--port", "5301", "-C", str(c), "-W", str(w), "-t", str(a.time), "--warmup", "1", "--json", "--no-save"])
                    rates.append(json.loads(out)["end"]["requests_per_second"])
                row.append(statistics.median(rates))
            print(f"| {c} | " + " | ".join(f"{r:,.0f}" for r in row) + " |")

        print("\n## receive modes at 2000 messages/s (TCP ping, same placement)")
        print("| poll | p50 us | p99.9 us | client CPU us/msg | server CPU us/msg |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for mode in ("block", "busy", "hybrid=50us"):
            rows = []
            for _ in range(max(1, a.runs // 2)):
                end = sonde_ping(sonde, a.time, False, ["--rate", "2000", "--poll", mode])
                rows.append((end["latency_ns"]["p50"] / 1e3, end["latency_ns"]["p999"] / 1e3,
                             end["client"]["cpu_us_per_message"], end["server"]["cpu_us_per_message"]))
            med = [statistics.median(col) for col in zip(*rows)]
            print(f"| {mode} | {med[0]:.2f} | {med[1]:.2f} | {med[2]:.2f} | {med[3]:.2f} |")


if __name__ == "__main__":
    main()
