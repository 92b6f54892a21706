#!/usr/bin/env python3
"""A/B of two sonde builds: the same tests with build A and build B (each side of a run is
one build: its agent and its controller), alternating A, B, A, B ..., medians and the
ratio B/A. For a refactoring that should change no figure (issue 29), every ratio should
sit within the runs' own spread.

Usage (root): python3 bench/ab.py --a OLD_SONDE --b NEW_SONDE [--runs 5] [--time 3]
"""

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(__file__))
from netns import namespaces, sonde_run  # noqa: E402

PORT = "5321"

# name -> (arguments, the figure read from the document, its unit, higher is better)
TESTS = {
    "stream": (["stream"], lambda d: d["end"]["receiver"]["bits_per_second"] / 1e9, "Gbit/s", True),
    "rpc -C 32": (["rpc", "-C", "32"], lambda d: d["end"]["requests_per_second"] / 1e3, "k req/s", True),
    "ping (TCP) p50": (["ping"], lambda d: d["end"]["latency_ns"]["p50"] / 1e3, "us", False),
    "pps": (["pps"], lambda d: d["end"]["packets"]["receiver"]["packets_per_second"] / 1e6, "Mpps", True),
    "pps --engine xdp": (["pps", "--engine", "xdp"], lambda d: d["end"]["packets"]["receiver"]["packets_per_second"] / 1e6, "Mpps", True),
    "rpc --udp --engine xdp -C 8": (["rpc", "--udp", "--engine", "xdp", "-C", "8"], lambda d: d["end"]["requests_per_second"] / 1e3, "k req/s", True),
}


def one(sonde, argv, t, figure):
    return figure(sonde_run(sonde, argv, t, PORT, serve_extra=("--allow", "xdp")))


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--time", type=int, default=3)
    ap.add_argument("--only", help="comma-separated test names")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the benchmark builds network namespaces")
    builds = {"A": os.path.abspath(a.a), "B": os.path.abspath(a.b)}
    tests = {k: v for k, v in TESTS.items() if not a.only or k in a.only.split(",")}
    print(f"| test | unit | A median | B median | B/A | A runs | B runs |")
    print(f"|---|---|---|---|---|---|---|")
    with namespaces(queues=2):
        for name, (argv, figure, unit, _) in tests.items():
            got = {"A": [], "B": []}
            for r in range(a.runs):
                for b in (("A", "B") if r % 2 == 0 else ("B", "A")):
                    got[b].append(one(builds[b], argv, a.time, figure))
            ma, mb = (statistics.median(got[b]) for b in "AB")
            runs = {b: " ".join(f"{x:.3g}" for x in got[b]) for b in "AB"}
            print(f"| {name} | {unit} | {ma:.3g} | {mb:.3g} | {mb / ma:.3f} | {runs['A']} | {runs['B']} |", flush=True)


if __name__ == "__main__":
    main()
