#!/usr/bin/env python3
"""The key set of each kind's result document, to check that a refactoring moved no JSON key.

Runs one short test of every kind (stream, bidir, ping, rpc, pps, pps over AF_XDP, ping over
AF_XDP, load, watch, STAMP to the agent's reflector, a fleet pair) with the given sonde between two namespaces and writes, per
kind, the sorted set of key paths (`end.sender.bits_per_second`, arrays as `[]`):

    python3 bench/doc_keys.py --sonde OLD --out before.json
    python3 bench/doc_keys.py --sonde NEW --out after.json
    python3 bench/doc_keys.py --diff before.json after.json     # exit 1 when a key moved
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from netns import CLIENT_NS, SERVER, client, namespaces, start_server  # noqa: E402

PORT = "5311"
STAMP_PORT = "8620"
SHORT = ["-t", "1", "--warmup", "0.2"]
RUNS = {
    "stream": ["stream", SERVER, "-P", "2", *SHORT],
    "bidir": ["stream", SERVER, "--bidir", *SHORT],
    "ping": ["ping", SERVER, *SHORT],
    "ping-udp": ["ping", SERVER, "--udp", *SHORT],
    "rpc": ["rpc", SERVER, "-C", "2", *SHORT],
    "pps": ["pps", SERVER, *SHORT],
    "pps-xdp": ["pps", SERVER, "--engine", "xdp", *SHORT],
    "ping-xdp": ["ping", SERVER, "--udp", "--engine", "xdp", *SHORT],
    "load": ["load", SERVER, "-t", "1", "--warmup", "0.2"],
}


def paths(value, prefix=""):
    """Every key path of a JSON value; an array's items under `[]`."""
    if isinstance(value, dict):
        out = set()
        for k, v in value.items():
            p = f"{prefix}.{k}" if prefix else k
            out |= {p} | paths(v, p)
        return out
    if isinstance(value, list):
        return set().union(*(paths(v, prefix + "[]") for v in value)) if value else set()
    return set()


def run_kinds(sonde):
    keys = {}
    for kind, argv in RUNS.items():
        out = client([sonde, *argv, "--port", PORT, "--json", "--no-save"])
        keys[kind] = sorted(paths(json.loads(out))) if out.strip() else ["(no document)"]
    watch = subprocess.run([sonde, "watch", "--json", "--no-save", "--", "sleep", "1"],
                           capture_output=True, text=True).stdout
    keys["watch"] = sorted(paths(json.loads(watch)))
    return keys


def run_stamp(sonde, tmp):
    """STAMP to the server's agent's stateful reflector (`serve --stamp`), 20 packets."""
    r = subprocess.run(["ip", "netns", "exec", CLIENT_NS, sonde, "stamp", f"{SERVER}:{STAMP_PORT}",
                        "-r", "20", "-n", "20", "--stateful", "--wait", "0.5", "--json",
                        "--db", os.path.join(tmp, "stamp.db")], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
    return sorted(paths(json.loads(r.stdout))) if r.stdout.strip() else ["(no document)"]


def run_fleet(sonde, tmp):
    """A fleet of two agents: the client namespace's agent sends to the server's."""
    fleet = os.path.join(tmp, "fleet.toml")
    with open(fleet, "w") as f:
        f.write(f'name = "keys"\nport = {PORT}\ntopology = "pairs"\npairs = [["a", "b"]]\n'
                f'[[agent]]\nname = "a"\naddress = "198.18.0.1"\n'
                f'[[agent]]\nname = "b"\naddress = "{SERVER}"\n'
                '[[test]]\ntype = "stream"\nduration = 1\nwarmup = 0.2\n')
    agent = subprocess.Popen(["ip", "netns", "exec", CLIENT_NS, sonde, "serve", "--bind", "198.18.0.1",
                              "--port", PORT, "--allow", "third-party"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        r = subprocess.run(["ip", "netns", "exec", CLIENT_NS, sonde, "fleet", fleet, "--ndjson", "--db",
                            os.path.join(tmp, "fleet.db")], capture_output=True, text=True)
        out = r.stdout
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
        docs = [json.loads(line) for line in out.splitlines() if line.strip()]
        return sorted(set().union(*(paths(d) for d in docs))) if docs else ["(no document)"]
    finally:
        agent.terminate()
        agent.wait()


def diff(before, after):
    a, b = (json.load(open(p)) for p in (before, after))
    moved = 0
    for kind in sorted(set(a) | set(b)):
        gone, new = set(a.get(kind, [])) - set(b.get(kind, [])), set(b.get(kind, [])) - set(a.get(kind, []))
        for k in sorted(gone):
            print(f"{kind}: - {k}")
        for k in sorted(new):
            print(f"{kind}: + {k}")
        moved += len(gone) + len(new)
        print(f"{kind}: {len(b.get(kind, []))} keys, {len(gone)} gone, {len(new)} new")
    return 1 if moved else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sonde", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "sonde"))
    ap.add_argument("--out")
    ap.add_argument("--diff", nargs=2, metavar=("BEFORE", "AFTER"))
    a = ap.parse_args()
    if a.diff:
        sys.exit(diff(*a.diff))
    if os.geteuid() != 0 or not a.out:
        sys.exit("run as root with --out FILE: the script builds network namespaces")
    sonde = os.path.abspath(a.sonde)
    with tempfile.TemporaryDirectory() as tmp, namespaces(queues=2) as servers:
        servers["sonde"] = start_server([sonde, "serve", "--bind", SERVER, "--port", PORT,
                                         "--allow", "xdp,third-party",
                                         "--stamp", f"{SERVER}:{STAMP_PORT}",
                                         "--stamp-allow", "198.18.0.0/15", "--stamp-stateful"])
        keys = run_kinds(sonde)
        keys["stamp"] = run_stamp(sonde, tmp)
        keys["fleet"] = run_fleet(sonde, tmp)
    with open(a.out, "w") as f:
        json.dump(keys, f, indent=1)
    for kind, k in keys.items():
        print(f"{kind}: {len(k)} keys")


if __name__ == "__main__":
    main()
