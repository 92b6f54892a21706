#!/usr/bin/env python3
"""Where a round-trip tail comes from: the scheduler's view of one ping run.

Runs one tool's ping-pong over the benchmark veth pair (server on CPU 1, client on CPU 0,
64-byte messages, as bench/rr_compare.py) while `perf sched record -a` records the middle
of the measured window, then reads `perf sched timehist`:

- the measuring threads (sonde's sonde-rr-*/sonde-echo-*, sockperf, neper): how long each
  waited for its CPU once woken (scheduling delay), by percentile;
- everything else that ran on the two CPUs in that time, by task: how often, how long in
  all and at most; the tool's own other threads (sonde's control threads) are marked.

A tail the tool makes shows up as its own threads running often or long on the measuring
CPUs; a tail the machine makes, as kernel threads and other processes there. perf adds its
own load (it is listed too): read the shares, not the latencies, of a traced run.

Usage (root): python3 bench/tail_trace.py [--tool sonde|sockperf] [--udp] [--time 4]
              [--sonde BINARY] [--extra 'SONDE FLAGS']
Needs: iproute2, perf (linux-perf), sockperf for --tool sockperf.
"""

import collections
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from netns import SERVER, client, namespaces, parse_args, start_server  # noqa: E402

SERVER_CPU, CLIENT_CPU = 1, 0
MEASURING = re.compile(r"^(sonde-rr-\d+|sonde-echo-\d+|sockperf|tcp_rr|udp_rr)$")
OWN = re.compile(r"^sonde")  # after MEASURING: the main thread (named after the binary), sonde-conn
LINE = re.compile(r"^\s*([\d.]+)\s+\[(\d+)\]\s+(\S.*?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def run_client(a, warmup):
    if a.tool == "sockperf":
        argv = ["sockperf", "ping-pong", "-i", SERVER, "-p", "11111" if a.udp else "11112", "-t",
                str(a.time + warmup), "-m", "64"] + ([] if a.udp else ["--tcp"])
    else:
        argv = [a.sonde, "ping", SERVER, "--port", "5301", "-t", str(a.time), "--warmup", str(warmup), "--json",
                "--no-save", *shlex.split(a.extra)] + (["--udp"] if a.udp else [])
    return client(argv, CLIENT_CPU)


def record(data, secs):
    subprocess.run(["perf", "sched", "record", "-a", "-o", data, "--", "sleep", str(secs)],
                   check=True, capture_output=True)


def timehist(data):
    """(cpu, task name without ids, sched delay us, run time us) per switch-out."""
    out = subprocess.run(["perf", "sched", "timehist", "-i", data], check=True, capture_output=True,
                         text=True).stdout
    rows = []
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            task = re.sub(r"\[\d+(/\d+)?\]$", "", m.group(3).strip())
            rows.append((int(m.group(2)), task, float(m.group(5)) * 1e3, float(m.group(6)) * 1e3))
    return rows


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def report(rows, secs):
    print(f"\n### measuring threads: scheduling delay once woken (us), {secs:.1f} s traced")
    print("| thread | runs | P50 | P99 | P99.9 | max |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    # By CPU too: sockperf's client and server threads share one name.
    delays = collections.defaultdict(list)
    for cpu, task, delay, _ in rows:
        if MEASURING.match(task):
            delays[f"{task} on CPU {cpu}"].append(delay)
    for task, d in sorted(delays.items()):
        print(f"| {task} | {len(d)} | {pct(d, .5):.1f} | {pct(d, .99):.1f} | {pct(d, .999):.1f} | {max(d):.1f} |")
    print(f"\n### everything else on CPUs {CLIENT_CPU} and {SERVER_CPU} (by task; * the tool's own)")
    print("| task | runs | total ms | longest us | runs > 100 us |")
    print("| --- | ---: | ---: | ---: | ---: |")
    other = collections.defaultdict(list)
    for cpu, task, _, run in rows:
        if cpu in (CLIENT_CPU, SERVER_CPU) and not MEASURING.match(task) and task != "<idle>":
            other[task].append(run)
    ranked = sorted(other.items(), key=lambda kv: -sum(kv[1]))
    shown = ranked[:12] + [kv for kv in ranked[12:] if OWN.match(kv[0])]
    if not any(OWN.match(t) for t, _ in ranked):
        print("| (no thread of the tool's own ran there) | 0 | 0 | 0 | 0 |")
    for task, r in shown:
        mark = " *" if OWN.match(task) else ""
        print(f"| {task}{mark} | {len(r)} | {sum(r) / 1e3:.2f} | {max(r):.0f} | {sum(1 for x in r if x > 100)} |")


def main():
    a = parse_args(1, 4, ("--tool", {"choices": ["sonde", "sockperf"], "default": "sonde"}),
                   ("--udp", {"action": "store_true"}), ("--extra", {"default": ""}))
    warmup = 1
    with namespaces() as servers, tempfile.TemporaryDirectory() as tmp:
        if a.tool == "sonde":
            servers["sonde"] = start_server([a.sonde, "serve", "--bind", SERVER, "--port", "5301"], SERVER_CPU)
        else:
            argv = ["sockperf", "server", "-i", SERVER] + (["-p", "11111"] if a.udp else ["-p", "11112", "--tcp"])
            servers["sockperf"] = start_server(argv, SERVER_CPU)
        data = os.path.join(tmp, "sched.data")
        secs = max(1.0, a.time - 1.0)
        rec = threading.Thread(target=lambda: (time.sleep(warmup + 0.5), record(data, secs)))
        rec.start()
        out = run_client(a, warmup)
        rec.join()
        print(f"# {a.tool} ping {'UDP' if a.udp else 'TCP'}, server on CPU {SERVER_CPU}, client on CPU {CLIENT_CPU}")
        if a.tool == "sonde":
            end = json.loads(out)["end"]
            lat = end["latency_ns"]
            print("# round trip us (traced run): " + ", ".join(f"{k} {lat[k] / 1e3:.0f}" for k in
                                                                 ("p50", "p99", "p999", "max")))
            for side in ("client", "server"):
                print(f"# {side} control thread: {end[side].get('control_thread')}")
        report(timehist(data), secs)


if __name__ == "__main__":
    main()
