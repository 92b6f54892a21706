"""A mesh of N agents on one machine (issue 33): N namespaces on a bridge, an agent in
each, a controller in one more running `sonde fleet` over every ordered pair, once. Prints
the rounds, the time per round, the controller's peak memory (VmHWM) and the control bytes
it sent and received (its veth's counters minus the tests' own data, which flows between
agents), then the arithmetic for a fleet of --scale nodes.

    sudo python3 bench/fleet_mesh.py --sonde target/release/sonde [--agents 16] [--kind ping] [--duration 1]
"""

import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import netns as N  # noqa: E402  (scratch key and store, removed at exit)

PREFIX = "sfm"
PORT = "5301"


def sh(*args, check=True):
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


def addr(k):
    return f"198.18.3.{k}"


def up(n):
    down(n)
    sh("ip", "netns", "add", f"{PREFIX}-br")
    sh("ip", "-n", f"{PREFIX}-br", "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", f"{PREFIX}-br", "link", "set", "br0", "up")
    for k in list(range(1, n + 1)) + [200]:
        ns = f"{PREFIX}-{k}"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", f"{PREFIX}{k}", "netns", ns, "type", "veth", "peer", "name", f"{PREFIX}{k}p", "netns", f"{PREFIX}-br")
        sh("ip", "-n", f"{PREFIX}-br", "link", "set", f"{PREFIX}{k}p", "master", "br0")
        sh("ip", "-n", f"{PREFIX}-br", "link", "set", f"{PREFIX}{k}p", "up")
        sh("ip", "-n", ns, "addr", "add", addr(k) + "/24", "dev", f"{PREFIX}{k}")
        sh("ip", "-n", ns, "link", "set", f"{PREFIX}{k}", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def down(n):
    for k in list(range(1, n + 1)) + [200, "br"]:
        sh("ip", "netns", "del", f"{PREFIX}-{k}", check=False)


def counters(k):
    base = f"/sys/class/net/{PREFIX}{k}/statistics/"
    out = sh("ip", "netns", "exec", f"{PREFIX}-{k}", "cat", base + "tx_bytes", base + "rx_bytes").stdout.split()
    return int(out[0]), int(out[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sonde", default="target/release/sonde")
    ap.add_argument("--agents", type=int, default=16)
    ap.add_argument("--kind", default="ping")
    ap.add_argument("--duration", default="1")
    ap.add_argument("--scale", type=int, default=1000)
    a = ap.parse_args()
    n, sonde = a.agents, os.path.abspath(a.sonde)
    up(n)
    agents = []
    try:
        for k in range(1, n + 1):
            agents.append(subprocess.Popen(
                ["ip", "netns", "exec", f"{PREFIX}-{k}", sonde, "serve", "--bind", addr(k), "--port", PORT,
                 "--allow", "third-party"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1)
        fleet = f'name = "mesh{n}"\nport = {PORT}\n' + "".join(
            f'[[agent]]\nname = "h{k}"\naddress = "{addr(k)}"\n' for k in range(1, n + 1))
        fleet += f'[[test]]\ntype = "{a.kind}"\nduration = {a.duration}\nwarmup = 0.2\n'
        path = f"/tmp/{PREFIX}-{os.getpid()}.toml"
        with open(path, "w") as f:
            f.write(fleet)
        tx0, rx0 = counters(200)
        began = time.monotonic()
        ctl = subprocess.Popen(["ip", "netns", "exec", f"{PREFIX}-200", sonde, "fleet", path],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        peak = 0
        while ctl.poll() is None:
            try:
                with open(f"/proc/{ctl.pid}/status") as st:
                    m = re.search(r"VmHWM:\s+(\d+) kB", st.read())
                    peak = max(peak, int(m.group(1))) if m else peak
            except FileNotFoundError:
                pass
            time.sleep(0.2)
        took = time.monotonic() - began
        err = ctl.stderr.read()
        tx1, rx1 = counters(200)
        os.remove(path)
    finally:
        for p in agents:
            p.terminate()
        for p in agents:
            p.wait()
        down(n)
    m = re.search(r"(\d+) pairs x (\d+) run\(s\) in (\d+) round\(s\)", err)
    pairs, rounds = int(m.group(1)), int(m.group(3))
    stored = re.search(r"(\d+) run\(s\) stored", err)
    ctl_bytes = (tx1 - tx0) + (rx1 - rx0)
    print(f"{n} agents: {pairs} pairs in {rounds} rounds, {took:.1f} s ({took / rounds:.2f} s a round), "
          f"{stored.group(1) if stored else '?'} stored; controller peak RSS {peak / 1024:.1f} MiB; "
          f"control bytes {ctl_bytes / 1e3:.0f} kB ({ctl_bytes / pairs / 1e3:.1f} kB a pair)")
    s = a.scale
    s_pairs, s_rounds = s * (s - 1), 2 * (s - 1)
    per_round = took / rounds
    print(f"{s} nodes: {s_pairs} ordered pairs in {s_rounds} rounds of {s // 2} tests at once; "
          f"at {per_round:.2f} s a round a full matrix takes {s_rounds * per_round / 3600:.2f} h; "
          f"control {s_pairs * ctl_bytes / pairs / 1e9:.2f} GB per matrix; "
          f"each node is in tests {2 * (s - 1) * per_round / 3600:.2f} h of it")


if __name__ == "__main__":
    main()
