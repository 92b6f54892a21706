#!/usr/bin/env python3
"""Throughput against an iperf3 far end against throughput against our own agent (issue 55).

Two namespaces joined by a veth pair (198.18.0.1 -> 198.18.0.2), `iperf3 -s` and `sonde
serve` both in the server namespace; from the client namespace `sonde stream --iperf3`
and `sonde stream` alternate, so both see the same machine state. With --rate a tbf of
that rate on the client's egress sets the bottleneck (neither far end's CPU: a debug
build of the agent is then a fair far end). Prints, per connection count, the medians of
our sender's figure and of each far end's own receiver figure (iperf3's results, the
agent's side), and their ratio.

Usage (root): python3 bench/iperf3_far_end.py [--runs 5] [--time 3] [--conns 1,4] [--rate 500mbit]
Needs: iproute2, iperf3, a build of sonde (--sonde PATH).
"""

import json
import os
import statistics

from netns import CLIENT_NS, SERVER, client, namespaces, parse_args, rotations, sh, start_server


def run(sonde, p, t, iperf3):
    far = ["--iperf3", "-p", "5201"] if iperf3 else ["--port", "5301"]
    out = client([sonde, "stream", SERVER, *far, "-P", str(p), "-t", str(t), "--warmup", "1",
                  "--json", "--no-save"])
    end = json.loads(out)["end"]
    return end["sender"]["bits_per_second"], end["receiver"]["bits_per_second"]


def main():
    a = parse_args(5, 3, ("--conns", {"default": "1,4"}), ("--rate", {"default": None}))
    with namespaces() as servers:
        if a.rate:
            sh("ip", "netns", "exec", CLIENT_NS, "tc", "qdisc", "add", "dev", "sbc", "root", "tbf",
               "rate", a.rate, "burst", "256kb", "latency", "20ms")
        servers["iperf3"] = start_server(["iperf3", "-s", "-B", SERVER, "-p", "5201"])
        servers["sonde"] = start_server([a.sonde, "serve", "--bind", SERVER, "--port", "5301"])
        print(f"# {a.runs} alternating runs of {a.time} s each way; veth, tbf {a.rate or 'none'}; "
              f"{os.cpu_count()} CPUs; {a.sonde}")
        print("| -P | vs iperf3 -s: sent Mbit/s | iperf3's own received | vs our agent: sent | the agent's own received | ratio (far ends' own) |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
        for p in [int(x) for x in a.conns.split(",")]:
            got = {True: [], False: []}
            for k in range(a.runs):
                for iperf3 in rotations([True, False], k):
                    got[iperf3].append(run(a.sonde, p, a.time, iperf3))
            med = {w: [statistics.median(x[i] for x in got[w]) / 1e6 for i in (0, 1)] for w in got}
            print(f"| {p} | {med[True][0]:.1f} | {med[True][1]:.1f} | {med[False][0]:.1f} | "
                  f"{med[False][1]:.1f} | **{med[True][1] / med[False][1]:.3f}** |")


if __name__ == "__main__":
    main()
