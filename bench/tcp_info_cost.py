"""What per-interval TCP_INFO sampling costs a stream (issue 32: at most 1 % of throughput):
`sonde stream -P 8` with a build from before the sampling (--before), with the current
build, and with the current build sampling every 0.1 s instead of every second; the three
rotate run by run, each side of a run one build (its agent and its controller). Prints
medians, each run and the ratios to the first configuration.

    sudo python3 bench/tcp_info_cost.py --before /work/ab/sonde-uring7 [--runs 5] [--time 5]
"""

import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import netns as N  # noqa: E402

PORT = "5331"


def one(sonde, extra, secs):
    """One run of `stream -P 8` with its own agent; the receiver's Gbit/s and engine."""
    agent = subprocess.Popen(["ip", "netns", "exec", N.SERVER_NS, sonde, "serve", "--bind", N.SERVER, "--port", PORT],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        agent.stdout.readline()
        out = N.client([sonde, "stream", N.SERVER, "--port", PORT, "-P", "8", "-t", str(secs), "--warmup", "1",
                        "--json", "--no-save", *extra])
        end = json.loads(out)["end"]
        return end["receiver"]["bits_per_second"] / 1e9, end["receiver"]["engine"]
    finally:
        agent.terminate()
        agent.wait(5)


def main():
    a = N.parse_args(5, 5, ("--before", dict(required=True)))
    configs = {
        "before sampling": (os.path.abspath(a.before), []),
        "current": (a.sonde, []),
        "current -i 0.1": (a.sonde, ["-i", "0.1"]),
    }
    got = {k: [] for k in configs}
    with N.namespaces():
        for run in range(a.runs):
            for name in N.rotations(list(configs), run):
                sonde, extra = configs[name]
                gbps, engine = one(sonde, extra, a.time)
                got[name].append(gbps)
                print(f"run {run} {name}: {gbps:.2f} Gbit/s ({engine})", flush=True)
    base = statistics.median(got["before sampling"])
    print("| configuration | median Gbit/s | ratio | runs |\n|---|---|---|---|")
    for name, xs in got.items():
        m = statistics.median(xs)
        print(f"| {name} | {m:.2f} | {m / base:.3f} | {', '.join(f'{x:.2f}' for x in xs)} |")


if __name__ == "__main__":
    main()
