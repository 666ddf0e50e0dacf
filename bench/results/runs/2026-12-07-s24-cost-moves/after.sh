#!/usr/bin/env bash
# Twenty-fourth session, after ca12b25, on the 2-core VM, one replay at a time, from the
# repository root: the mixed fleet (8 H200 + 8 A10G sim replicas, as routing-profiles.md "Mixed
# fleet", kvcascade alone) and two one-against-four router pairs (H200 rl, seed 1, 5,000
# requests, as ../2026-12-07-s23-routers-16core/pairs.sh).
set -u
d=bench/results/runs/2026-12-07-s24-cost-moves/after
k=build/cli/kvcascade
for spec in "chat 110" "mixed 60"; do
  set -- $spec
  $k bench routing --sim-preset h200-llama3-8b,a10g-llama3-8b --replicas 16 --requests 5000 \
    --mix "$1" --rate "$2" --policy kvcascade --out "$d/mixed-fleet-$1.json" 2>&1 |
    grep -v '^  \[' >"$d/mixed-fleet-$1.txt"
done
for i in 1 2; do
  for n in 1 4; do
    $k bench routing --replicas 16 --requests 5000 --mix rl --seed 1 --policy kvcascade \
      --routers $n 2>&1 | grep -v '^  \[' >"$d/rl-r$n-$i.txt"
  done
done
