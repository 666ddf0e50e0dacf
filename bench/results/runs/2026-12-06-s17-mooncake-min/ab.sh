#!/usr/bin/env bash
# Seventeenth session: the replicas' insertion by reuse (--kv-cold-reuse-rate, default 0.1)
# against LRU alone (0) in one binary, on the Mooncake trace at the A10G profile, alternating.
# Input as in ../2026-12-06-s10-mooncake/run.sh ($MOONCAKE, sha256 42af0f9a...).
set -u
d=bench/results/runs/2026-12-06-s17-mooncake-min
k=build/cli/kvcascade
python3 bench/mooncake_trace.py "$MOONCAKE" /tmp/mooncake-x1.jsonl --time-scale 1
for run in 1 2; do
  for rate in 0 0.1; do
    $k bench routing --sim-preset a10g-llama3-8b --replicas 16 --trace /tmp/mooncake-x1.jsonl \
      --policy kvcascade --kv-cold-reuse-rate $rate --out "$d/ab-rate$rate-run$run.json" \
      > "$d/ab-rate$rate-run$run.txt" 2>&1
  done
done
