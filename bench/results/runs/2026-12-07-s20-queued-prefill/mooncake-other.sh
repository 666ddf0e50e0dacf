#!/usr/bin/env bash
# Twentieth session: the Mooncake rows of the other profiles (H200 at 4x arrivals, CPU at 1x;
# ../2026-12-06-s10-mooncake/run.sh, no host tier) with kvcascade alone after the queued-prefill
# fix, on the 2-core VM, nothing else running. $MOONCAKE as there. From the repository root.
set -u
d=bench/results/runs/2026-12-07-s20-queued-prefill
k=build/cli/kvcascade
for s in 1 4; do
  [ -f /tmp/mooncake-x$s.jsonl ] ||
    python3 bench/mooncake_trace.py "$MOONCAKE" /tmp/mooncake-x$s.jsonl --time-scale $s
done
run() {  # name preset scale
  $k bench routing --sim-preset "$2" --replicas 16 --trace /tmp/mooncake-x$3.jsonl \
    --policy kvcascade --out "$d/$1.json" 2>&1 | grep -v '^  \[' > "$d/$1.txt"
}
run moon-h200-x4-run1 h200-llama3-8b 4
run moon-h200-x4-run2 h200-llama3-8b 4
run moon-cpu-x1 cpu-llama3-8b 1
