#!/usr/bin/env python3
"""sonde stream's engines side by side: kernel, uring and uring --zerocopy, over one veth
pair between two namespaces (bench/netns.py), in alternating order. Prints medians of
throughput and of CPU seconds per GB (both processes, measured as bench/stream_compare.py
does: the client's rusage, the agent's /proc/PID/stat delta, over the bytes the sender
wrote in the whole test), then, from one more run per engine under
`perf stat -e raw_syscalls:sys_enter`, each side's system calls per GB and per buffer.

Usage (root): python3 bench/stream_uring.py [--runs 5] [--time 5] [--conns 1,8] [--ns us-b]
              [--engines "kernel,uring,uring --zerocopy,kernel --threads 2,uring --threads 2"]
Needs: iproute2, perf, a release build of sonde.
"""

import json
import os
import signal
import statistics
import subprocess
import tempfile
import time

import netns
from netns import HZ, SERVER, children_cpu_s, namespaces, parse_args, proc_cpu_s, rotations, start_server

PORT = 5301
BUFFER = 128 << 10
ENGINES = {
    "kernel": ["--engine", "kernel"],
    "uring": ["--engine", "uring"],
    "uring --zerocopy": ["--engine", "uring", "--zerocopy"],
    # One worker per CPU on each side, each with several connections in its ring.
    "kernel --threads 2": ["--engine", "kernel", "--threads", "2", "--server-threads", "2"],
    "uring --threads 2": ["--engine", "uring", "--threads", "2", "--server-threads", "2"],
}
DEFAULT_ENGINES = "kernel,uring,uring --zerocopy"


# A run during which other processes took more CPU than this is run again (at most
# RETRIES times): the machine is shared, and a build beside a run takes 5-7 s of it.
# Ticks and process times disagree on interrupts: a quiet -P 8 run shows about 1 s.
FOREIGN_MAX_S = 2.5
RETRIES = 3


def host_busy_s():
    """CPU seconds the host was busy (user, nice, system, irq, softirq: a process's own
    time includes the interrupts served while it ran, such as a veth's receive)."""
    with open("/proc/stat") as f:
        t = [int(x) for x in f.readline().split()[1:8]]
    return (sum(t) - t[3] - t[4]) / HZ


def wait_quiet(limit_s=600):
    """Waits (at most `limit_s`) for a second in which other processes take under a
    tenth of a CPU: a build must end before a run starts."""
    until = time.time() + limit_s
    while time.time() < until:
        h0 = host_busy_s()
        time.sleep(1)
        if host_busy_s() - h0 < 0.1:
            return
        time.sleep(4)


def measured(sonde, p, t, flags, agent_pid):
    """One run on a quiet host: (end of its document, CPU seconds of both processes,
    CPU seconds of every other process); run again while others took too much."""
    for _ in range(RETRIES + 1):
        wait_quiet()
        h0, s0, c0 = host_busy_s(), proc_cpu_s(agent_pid), children_cpu_s()
        end = run_once(sonde, p, t, flags)
        cpu = proc_cpu_s(agent_pid) - s0 + children_cpu_s() - c0
        foreign = host_busy_s() - h0 - cpu
        if foreign <= FOREIGN_MAX_S:
            break
        print(f"# run again: other processes took {foreign:.2f} CPU s", flush=True)
        time.sleep(2)
    return end, cpu, foreign


def stream_argv(sonde, p, t, flags):
    return [sonde, "stream", SERVER, "--port", str(PORT), "-P", str(p), "-t", str(t),
            "--warmup", "1", "--json", "--no-save", *flags]


def run_once(sonde, p, t, flags, wrap=()):
    """One test; its document's end, the client command wrapped in `wrap` (perf)."""
    argv = ["ip", "netns", "exec", netns.CLIENT_NS, *wrap, *stream_argv(sonde, p, t, flags)]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["end"]


def syscalls(sonde, p, t, flags, agent_pid):
    """Each side's system calls in one run: (client, agent, bytes the sender wrote, the
    sender's notes)."""
    with tempfile.TemporaryDirectory() as d:
        c_out, s_out = os.path.join(d, "c"), os.path.join(d, "s")
        ev = ["-e", "raw_syscalls:sys_enter", "-x,"]
        agent = subprocess.Popen(["perf", "stat", *ev, "-o", s_out, "-p", str(agent_pid)])
        time.sleep(0.3)
        end = run_once(sonde, p, t, flags, wrap=["perf", "stat", *ev, "-o", c_out, "--"])
        agent.send_signal(signal.SIGINT)
        agent.wait()
        count = lambda f: int(next(l for l in open(f) if "raw_syscalls" in l).split(",")[0])
        s = end["sender"]
        return count(c_out), count(s_out), s["total_bytes"], s.get("notes", [])


def main():
    a = parse_args(5, 5, ("--conns", {"default": "1,8"}), ("--ns", {"default": "us-b"}),
                   ("--engines", {"default": DEFAULT_ENGINES}))
    engines = {k: ENGINES[k] for k in a.engines.split(",")}
    netns.CLIENT_NS, netns.SERVER_NS = a.ns + "c", a.ns + "s"
    with namespaces() as servers:
        agent = start_server([a.sonde, "serve", "--bind", SERVER, "--port", str(PORT)])
        servers["sonde"] = agent
        print(f"# {a.runs} alternating runs of {a.time} s (+1 s warm-up) per engine; "
              f"veth between two namespaces; {os.cpu_count()} CPUs; --buffer {BUFFER >> 10}K")
        for p in [int(x) for x in a.conns.split(",")]:
            rates = {k: [] for k in engines}
            cpu_per_gb = {k: [] for k in engines}
            cycles = {k: [] for k in engines}
            others = {k: [] for k in engines}
            for run in range(a.runs):
                for name in rotations(list(engines), run):
                    end, cpu, other = measured(a.sonde, p, a.time, engines[name], agent.pid)
                    others[name].append(other)
                    gb = end["sender"]["total_bytes"] / 1e9
                    rates[name].append(end["receiver"]["bits_per_second"])
                    cpu_per_gb[name].append(cpu / gb if gb else float("nan"))
                    cycles[name].append(end["one_host"]["cycles_per_byte"])
                    time.sleep(0.5)
            print(f"\n## -P {p}")
            print("| engine | median Gbit/s | runs (Gbit/s) | median CPU s/GB "
                  "| cycles/B (result) | client syscalls/GB | agent syscalls/GB "
                  "| per 128K buffer (c/a) | others' CPU s (max) |")
            print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
            notes = []
            for name, flags in engines.items():
                c, s, b, n = syscalls(a.sonde, p, a.time, flags, agent.pid)
                notes += [f"{name}: {x}" for x in n if x.startswith("send_zc")]
                bufs = b / BUFFER
                runs = ", ".join(f"{r / 1e9:.2f}" for r in rates[name])
                print(f"| {name} | {statistics.median(rates[name]) / 1e9:.2f} | {runs} "
                      f"| {statistics.median(cpu_per_gb[name]):.3f} "
                      f"| {statistics.median(cycles[name]):.2f} | {c / b * 1e9:.0f} "
                      f"| {s / b * 1e9:.0f} | {c / bufs:.2f} / {s / bufs:.2f} "
                      f"| {max(others[name]):.2f} |", flush=True)
                time.sleep(0.5)
            for n in notes:
                print(f"\n{n}")


if __name__ == "__main__":
    main()
