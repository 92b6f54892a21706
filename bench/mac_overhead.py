#!/usr/bin/env python3
"""What the control channel's authentication and MACs cost a measurement: the same tests
against a keyed agent (mutual proof, every control frame sealed) and an open one
(--insecure-no-key, nothing sealed), alternating runs on one veth pair between two
namespaces (198.18.0.1 -> 198.18.0.2). The data path is the same in both; only control
frames (a handful per test, one interval sample per second each way) carry a MAC.

Tests: stream -P 1 (Gbit/s received) and rpc -C 32 (requests/s). Prints each run, the
medians and keyed/open ratios. Runs go into a scratch store, never the user's.

Usage (root): python3 bench/mac_overhead.py [--runs 5] [--time 3]
Needs: iproute2 and a release build of sonde.
"""

import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(__file__))
from netns import SERVER, client, namespaces, parse_args, rotations, start_server  # noqa: E402

TESTS = {
    "stream": (["stream", "-P", "1"], lambda e: e["receiver"]["bits_per_second"] / 1e9, "Gbit/s"),
    "rpc": (["rpc", "-C", "32"], lambda e: e["requests_per_second"], "req/s"),
}
PORTS = {"keyed": "5301", "open": "5302"}


def run(sonde, config, test, t):
    words, figure, _ = TESTS[test]
    argv = [sonde, *words[:1], SERVER, "--port", PORTS[config], *words[1:], "-t", str(t),
            "--warmup", "0.5", "--json", "--no-save"]
    if config == "open":
        # No key on the controller either: env -u drops the scripts' key.
        argv = ["env", "-u", "SONDE_KEY_FILE", *argv]
    return figure(json.loads(client(argv))["end"])


def main():
    a = parse_args(5, 3)
    results = {(c, t): [] for c in PORTS for t in TESTS}
    with namespaces() as servers:
        servers["keyed"] = start_server([a.sonde, "serve", "--bind", SERVER, "--port", PORTS["keyed"]])
        servers["open"] = start_server(["env", "-u", "SONDE_KEY_FILE", a.sonde, "serve", "--bind", SERVER,
                                        "--port", PORTS["open"], "--insecure-no-key"])
        for r in range(a.runs):
            for test in TESTS:
                for config in rotations(list(PORTS), r):
                    v = run(a.sonde, config, test, a.time)
                    results[(config, test)].append(v)
                    print(f"run {r} {test:6} {config:5} {v:,.3f} {TESTS[test][2]}", flush=True)
    for test, (_, _, unit) in TESTS.items():
        k = statistics.median(results[("keyed", test)])
        o = statistics.median(results[("open", test)])
        print(f"{test}: keyed {k:,.3f} {unit}, open {o:,.3f} {unit}, keyed/open {k / o:.3f}")


if __name__ == "__main__":
    main()
