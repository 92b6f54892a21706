#!/usr/bin/env bash
# sonde rpc -C 32 with its default workers against other worker counts, alternating runs
# on one veth pair between two namespaces (198.18.0.1 -> 198.18.0.2), as root:
#   bash bench/rpc_defaults.sh [RUNS] [SECONDS]
# Prints one line per run: config, requests/s, P99 us, client and agent worker threads.
# Runs go into a scratch store, never the user's.
set -euo pipefail
runs=${1:-5}; secs=${2:-3}
S=$(cd "$(dirname "$0")/.." && pwd)/target/release/sonde
export SONDE_DB=$(mktemp -u /tmp/sonde-bench-XXXXXX.db)
cleanup() { kill "${agent:-0}" 2>/dev/null || true; ip netns del sbr-c 2>/dev/null || true; ip netns del sbr-s 2>/dev/null || true; rm -f "$SONDE_DB"; }
trap cleanup EXIT
cleanup
ip netns add sbr-c; ip netns add sbr-s
ip link add sbrc netns sbr-c type veth peer name sbrs netns sbr-s
ip -n sbr-c addr add 198.18.0.1/24 dev sbrc; ip -n sbr-s addr add 198.18.0.2/24 dev sbrs
for n in sbr-c sbr-s; do ip -n $n link set lo up; done
ip -n sbr-c link set sbrc up; ip -n sbr-s link set sbrs up
ip netns exec sbr-s "$S" serve --bind 198.18.0.2 --port 5301 >/dev/null 2>&1 &
agent=$!
sleep 0.5
declare -A extra=([default]="" [threads-2]="--threads 2 --server-threads 2" [threads-32]="--threads 32 --server-threads 32")
for i in $(seq "$runs"); do
  for mode in default threads-2 threads-32; do
    # shellcheck disable=SC2086
    ip netns exec sbr-c "$S" rpc 198.18.0.2 -C 32 -t "$secs" --warmup 0.5 --json --no-save ${extra[$mode]} |
      python3 -c "import json,sys; e=json.load(sys.stdin)['end']; print('$mode', round(e['requests_per_second']), round(e['latency_ns']['p99']/1000), e['client']['threads'], e['server']['threads'])"
  done
done
