#!/usr/bin/env bash
# The mesh's cost, builds rotated each round (A B C, B C A, ...): bench/mesh_scale.py with
# 50 agents at 2 probes/s per peer (1,000 peers' packet rates), the receive path in NAPI
# threads (NAPI="" runs without them). Not a test: a quiet machine, nothing else timed.
#   bash bench/mesh_rotate.sh ROUNDS BIN...
n=$1; shift; bins=("$@"); k=${#bins[@]}
here=$(dirname "$0")
for r in $(seq 0 $((n - 1))); do
  for j in $(seq 0 $((k - 1))); do
    bin=${bins[$(( (r + j) % k ))]}
    echo "== $(basename "$bin") round $r"
    python3 "$here/mesh_scale.py" --sonde "$bin" --agents 50 --rate 2 --secs 30 --warmup 20 \
      --phantom "" ${NAPI---napi-threads} 2>&1 | grep -E "mesh:|CPU|round trips|NAPI|RSS"
  done
done
