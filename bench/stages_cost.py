#!/usr/bin/env python3
"""What the stages cost (issues 43 and 54): the same ping and rpc with stages off, sampled
(the default: one message in N stamped at both ends) and on every message (`--stages
all`), and, given `--prev`, a previous build's `--stages` (every message) and its runs
without, each round in a rotated order, on a veth pair, ping's ends pinned (client CPU 0,
agent CPU 1) so that latency is compared at one placement. Medians of the P50 and of the
messages per second, each variant's ratio to stages off of its own build, each end's
process CPU per message (client, agent) and their sum's ratio to off's, the messages split
per run, the 1-minute load average at each run's start (the machine may be shared: run it
under the timing lock, `flock /tmp/sonde-timing-tests.lock ...`) and each run's rate.

Usage (root): python3 bench/stages_cost.py --sonde SONDE [--prev OLD_SONDE] [--runs 5] [--time 2]
"""

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(__file__))
from netns import namespaces, sonde_run  # noqa: E402

PORT = "5322"
PIN = ["--cpus", "0", "--server-cpus", "1"]

TESTS = {
    "ping (TCP)": ["ping", *PIN],
    "ping --udp": ["ping", "--udp", *PIN],
    "ping --rate 1000": ["ping", "--rate", "1000", *PIN],
    "rpc -C 32": ["rpc", "-C", "32", "--engine", "kernel"],
    # The same at one placement (the client's workers on CPU 0, the agent's on CPU 1):
    # unpinned, where the scheduler puts the two ends moves the rate more than stages do.
    "rpc -C 32 pinned": ["rpc", "-C", "32", "--engine", "kernel", *PIN],
    "rpc -C 32 uring": ["rpc", "-C", "32", "--engine", "uring"],
}

# variant -> (which binary, its stage flags, the variant it is compared with)
VARIANTS = {
    "off": ("new", ["--stages", "off"], "off"),
    # The default: one in 16 with one message in flight (ping), one in 64 with four or
    # more (rpc -C 32), `default_stage_every`.
    "sampled": ("new", [], "off"),
    "1/16": ("new", ["--stages", "16"], "off"),
    "1/32": ("new", ["--stages", "32"], "off"),
    "1/256": ("new", ["--stages", "256"], "off"),
    "all": ("new", ["--stages", "all"], "off"),
    # Receive stamps and the echo's figures on every message, a stamped one in 65,536:
    # what sampling cannot take away.
    "1/65536": ("new", ["--stages", "65536"], "off"),
    "prev off": ("prev", [], "prev off"),
    "prev all": ("prev", ["--stages"], "prev off"),
}


def load1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def one(sonde, argv, t, flags):
    load = load1()
    end = sonde_run(sonde, [*argv, *flags], t, PORT)["end"]
    split = (end.get("stages") or {}).get("split", 0)
    # Each end's process CPU per message: what a message costs, whatever else ran on the
    # CPUs (the rate is what the CPUs left over allowed).
    cpu = [(end.get(s) or {}).get("cpu_us_per_message") or 0.0 for s in ("client", "server")]
    return end["latency_ns"]["p50"] / 1e3, end["requests_per_second"] / 1e3, split, load, *cpu


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--sonde", required=True)
    ap.add_argument("--prev", help="a previous build's sonde (its --stages: every message)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--time", type=int, default=2)
    ap.add_argument("--only", help="comma-separated test names")
    ap.add_argument("--variants", help="comma-separated variants (default: all that can run)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the benchmark builds network namespaces")
    bins = {"new": os.path.abspath(a.sonde)}
    if a.prev:
        bins["prev"] = os.path.abspath(a.prev)
    variants = {k: v for k, v in VARIANTS.items() if v[0] in bins
                and (not a.variants or k in a.variants.split(","))}
    tests = {k: v for k, v in TESTS.items() if not a.only or k in a.only.split(",")}
    print(f"kernel {os.uname().release}; {a.runs} rounds of {a.time} s, variants in a rotated order")
    print("| test | variant | P50 (us) | P50 / off | k msg/s | rate / off | CPU us/msg client, agent | CPU / off "
          "| split per run | load avg | rate runs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    names = list(variants)
    with namespaces(queues=2):
        for name, argv in tests.items():
            got = {v: [] for v in names}
            for r in range(a.runs):
                order = names[r % len(names):] + names[:r % len(names)]
                for v in order:
                    b, flags, _ = variants[v]
                    got[v].append(one(bins[b], argv, a.time, flags))
            med = {v: [statistics.median(x[i] for x in got[v]) for i in range(6)] for v in names}
            for v in names:
                base = med[variants[v][2]]
                p50, rate, split, load, cc, sc = med[v]
                cpu = (cc + sc) / max(base[4] + base[5], 1e-9)
                runs = " ".join(f"{x[1]:.3g}" for x in got[v])
                print(f"| {name} | {v} | {p50:.3g} | {p50 / base[0]:.3f} | {rate:.3g} | {rate / base[1]:.3f} "
                      f"| {cc:.2f}, {sc:.2f} | {cpu:.3f} | {split:,.0f} | {load:.1f} | {runs} |", flush=True)


if __name__ == "__main__":
    main()
