#!/usr/bin/env bash
# Twenty-sixth session, on the 2-core VM with nothing else running: the committed build before
# the step-model change (beae173, BASE=its kvcascade) against bf3db7f (build/cli/kvcascade),
# alternating: the A10G Mooncake row (TRACE: bench/mooncake_trace.py --time-scale 1), the H200
# Mooncake row (TRACE4: --time-scale 4) and the mixed fleet's chat@110 (8 H200 + 8 A10G).
set -u
d=bench/results/runs/2026-12-07-s26-leverage
base=${BASE:-/tmp/base-beae173/build/cli/kvcascade}
trace=${TRACE:-/tmp/mooncake-x1.jsonl}
trace4=${TRACE4:-/tmp/mooncake-x4.jsonl}
bin() { [ "$1" = base ] && echo "$base" || echo build/cli/kvcascade; }
for r in ${ROUNDS:-1 2 3}; do
  for b in base new; do
    "$(bin $b)" bench routing --sim-preset a10g-llama3-8b --replicas 16 --trace "$trace" \
      --policy kvcascade --kv-host-memory-gb 32 --out "$d/ab-a10g-$b-r$r.json" 2>&1 |
      grep -v '^  \[' | sed -n 3p >"$d/ab-a10g-$b-r$r.txt"
    "$(bin $b)" bench routing --sim-preset h200-llama3-8b --replicas 16 --trace "$trace4" \
      --policy kvcascade --out "$d/ab-h200-$b-r$r.json" 2>&1 |
      grep -v '^  \[' | sed -n 3p >"$d/ab-h200-$b-r$r.txt"
    "$(bin $b)" bench routing --sim-preset h200-llama3-8b,a10g-llama3-8b --replicas 16 \
      --requests 5000 --mix chat --rate 110 --policy kvcascade --out "$d/ab-mixed-$b-r$r.json" 2>&1 |
      grep -v '^  \[' | sed -n 3p >"$d/ab-mixed-$b-r$r.txt"
  done
done
