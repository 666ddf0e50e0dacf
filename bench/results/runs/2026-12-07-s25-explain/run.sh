#!/usr/bin/env bash
# Twenty-fifth session, on the 2-core VM with nothing else running: the A10G Mooncake row with the
# committed build (ef88a97: the decisions file's last column is the policy's view of every
# replica, RouteDecision::detail), two runs, for where the busiest replica's excess and the
# starved replica come from. TRACE: bench/mooncake_trace.py --time-scale 1.
set -u
d=bench/results/runs/2026-12-07-s25-explain
trace=${TRACE:-/tmp/mooncake-x1.jsonl}
for i in ${ROUNDS:-1 2}; do
  mkdir -p "/tmp/dec25x-$i"
  build/cli/kvcascade bench routing --sim-preset a10g-llama3-8b --replicas 16 --trace "$trace" \
    --policy kvcascade --kv-host-memory-gb 32 --decisions "/tmp/dec25x-$i" \
    --out "$d/a10g-v$i.json" 2>&1 | grep -v '^  \[' >"$d/a10g-v$i.txt"
  gzip -c /tmp/dec25x-"$i"/*.tsv >"$d/decisions-v$i.tsv.gz"
done
