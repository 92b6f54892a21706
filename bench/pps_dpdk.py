#!/usr/bin/env python3
"""DPDK against AF_XDP and kernel sockets: `sonde pps --engine dpdk` (dpdk-testpmd txonly
and rxonly through net_af_packet, the only DPDK device a veth has) against
`--engine xdp` and the kernel engine, 64-byte packets on the wire, on a veth pair between
two namespaces.

Received packets/s: sonde's receiver figure, whichever engine (testpmd's own port count
for dpdk: within 1 % of the veth's counter, tests/suite/dpdk_netns.rs). CPU per packet: the
agent's process CPU (for dpdk: sonde's and its testpmd's) and the whole host's busy CPU,
per packet received. Alternating runs, medians, ratios.

Usage (root): python3 bench/pps_dpdk.py [--runs 5] [--time 3]
With free hugepages (vm.nr_hugepages) testpmd also runs on them; without, on ordinary
pages only (--dpdk-args=--no-huge).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from netns import SERVER, alternate, namespaces, parse_args, start_server  # noqa: E402
from pps_xdp import pps_table, run_sonde  # noqa: E402


def free_hugepages():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("HugePages_Free:"):
                return int(line.split()[1])
    return 0


def main():
    a = parse_args(5, 3)
    s, t = a.sonde, a.time
    dpdk = ["--engine", "dpdk"]
    tools = {
        "sonde dpdk --no-huge": lambda: run_sonde(s, t, [*dpdk, "--dpdk-args=--no-huge"]),
        "sonde xdp --tx-threads 1": lambda: run_sonde(s, t, ["--engine", "xdp", "--tx-threads", "1"]),
        "sonde xdp (defaults)": lambda: run_sonde(s, t, ["--engine", "xdp"]),
        "sonde kernel --tx-threads 1 --flows 1": lambda: run_sonde(s, t, ["--tx-threads", "1", "--flows", "1"]),
        "sonde kernel (defaults)": lambda: run_sonde(s, t, []),
    }
    if free_hugepages() >= 64:
        tools["sonde dpdk (hugepages)"] = lambda: run_sonde(s, t, dpdk)
    with namespaces(1) as servers:
        servers["sonde"] = start_server([s, "serve", "--bind", SERVER, "--port", "5301", "--allow", "dpdk"])
        runs = alternate(tools, a.runs)
    print(f"# {a.runs} alternating runs of {t} s; 64-byte packets; veth with 1 queue a side; {os.cpu_count()} CPUs")
    med = pps_table(runs, "engine")
    d = med["sonde dpdk --no-huge"]
    print(f"\ndpdk / xdp, one sending thread: {d / med['sonde xdp --tx-threads 1']:.2f}")
    print(f"dpdk / kernel, one sending thread: {d / med['sonde kernel --tx-threads 1 --flows 1']:.2f}")
    if "sonde dpdk (hugepages)" in med:
        print(f"dpdk hugepages / no-huge: {med['sonde dpdk (hugepages)'] / d:.2f}")


if __name__ == "__main__":
    main()
