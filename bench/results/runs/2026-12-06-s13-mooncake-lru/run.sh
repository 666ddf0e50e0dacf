#!/usr/bin/env bash
# Thirteenth session: the Mooncake trace on the A10G profile (issue 28 §1's independent trace,
# the row whose hits were not met) again, kvcascade only, now with the fleet-LRU reference
# (bench routing's "(fleet LRU)" line: the 16 replicas' KV blocks pooled as one LRU cache).
# Input as in runs/2026-12-06-s10-mooncake/run.sh ($MOONCAKE: the 1,000-line trace, sha256
# 42af0f9a...); from the repository root, nothing else running.
set -u
d=bench/results/runs/2026-12-06-s13-mooncake-lru
k=build/cli/kvcascade
python3 bench/mooncake_trace.py "$MOONCAKE" /tmp/mooncake-x1.jsonl --time-scale 1
$k bench routing --sim-preset a10g-llama3-8b --replicas 16 --trace /tmp/mooncake-x1.jsonl \
  --policy kvcascade --out "$d/a10g-x1.json" > "$d/a10g-x1.txt" 2>&1
