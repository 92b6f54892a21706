#!/usr/bin/env python3
"""What `--stages` costs (issue 43): the same ping and rpc with and without it, alternating
off, on, on, off ..., on a veth pair, both ends pinned (client CPU 0, agent CPU 1) so that
latency is compared at one placement. Medians of the P50 and of the messages per second,
and the ratio on/off. On by default if the P50 moves less than 3 %.

Usage (root): python3 bench/stages_cost.py --sonde target/release/sonde [--runs 5] [--time 3]
"""

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(__file__))
from netns import namespaces, sonde_run  # noqa: E402

PORT = "5322"
PIN = ["--cpus", "0", "--server-cpus", "1"]

# name -> arguments; each is run with and without --stages
TESTS = {
    "ping (TCP)": ["ping", *PIN],
    "ping --udp": ["ping", "--udp", *PIN],
    "ping --rate 1000": ["ping", "--rate", "1000", *PIN],
    "rpc -C 32": ["rpc", "-C", "32", "--engine", "kernel"],
}


def one(sonde, argv, t, stages):
    end = sonde_run(sonde, [*argv, *(["--stages"] if stages else [])], t, PORT)["end"]
    return end["latency_ns"]["p50"] / 1e3, end["requests_per_second"] / 1e3


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--sonde", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--time", type=int, default=3)
    ap.add_argument("--only", help="comma-separated test names")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the benchmark builds network namespaces")
    sonde = os.path.abspath(a.sonde)
    tests = {k: v for k, v in TESTS.items() if not a.only or k in a.only.split(",")}
    print("| test | P50 off (us) | P50 on (us) | on/off | k msg/s off | k msg/s on | on/off | P50 runs off | P50 runs on |")
    print("|---|---|---|---|---|---|---|---|---|")
    with namespaces(queues=2):
        for name, argv in tests.items():
            got = {False: [], True: []}
            for r in range(a.runs):
                for stages in ((False, True) if r % 2 == 0 else (True, False)):
                    got[stages].append(one(sonde, argv, a.time, stages))
            p50 = {s: statistics.median(x[0] for x in got[s]) for s in got}
            rate = {s: statistics.median(x[1] for x in got[s]) for s in got}
            runs = {s: " ".join(f"{x[0]:.3g}" for x in got[s]) for s in got}
            print(f"| {name} | {p50[False]:.3g} | {p50[True]:.3g} | {p50[True] / p50[False]:.3f} "
                  f"| {rate[False]:.3g} | {rate[True]:.3g} | {rate[True] / rate[False]:.3f} "
                  f"| {runs[False]} | {runs[True]} |", flush=True)


if __name__ == "__main__":
    main()
