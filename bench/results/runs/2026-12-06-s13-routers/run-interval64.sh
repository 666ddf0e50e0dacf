#!/usr/bin/env bash
# Thirteenth session: is the four-router gap the 2-core machine's? The same pairs as run.sh with
# replicas streaming 64 tokens a chunk (a quarter of the replay's own per-token CPU: replicas,
# routers and client are one process), three pairs, each replay alone.
set -u
d=bench/results/runs/2026-12-06-s13-routers
k=build/cli/kvcascade
for i in 1 2 3; do
  for n in 1 4; do
    $k bench routing --replicas 16 --requests 5000 --mix rl --seed 1 --policy kvcascade \
      --routers $n --stream-interval 64 > "$d/rl-si64-r$n-$i.txt" 2>&1
    echo "run $i routers $n: $(grep -E '^rl +kvcascade' "$d/rl-si64-r$n-$i.txt" | awk '{print $5, $6, $7}')"
  done
done | tee "$d/summary-interval64.txt"
