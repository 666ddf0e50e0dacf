#!/usr/bin/env bash
# Seventeenth session: the same A/B with twice the KV blocks per replica (5,282 of 16 tokens), to
# see whether the 16 small pools are what keeps the fleet from the pooled gain.
set -u
d=bench/results/runs/2026-12-06-s17-mooncake-min
k=build/cli/kvcascade
python3 bench/mooncake_trace.py "$MOONCAKE" /tmp/mooncake-x1.jsonl --time-scale 1
for rate in 0 0.1; do
  $k bench routing --sim-preset a10g-llama3-8b --replicas 16 --kv-blocks 5282 \
    --trace /tmp/mooncake-x1.jsonl --policy kvcascade --kv-cold-reuse-rate $rate \
    --out "$d/ab2x-rate$rate.json" > "$d/ab2x-rate$rate.txt" 2>&1
done
