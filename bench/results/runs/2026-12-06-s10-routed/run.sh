#!/usr/bin/env bash
# Tenth session: the CPU profile's rl row, kvcascade alone, seeds 1-3, before (c1d24ff) and after
# (625e90f) the routed index; and where the hits went before (seed 2, --decisions, whose TSV now
# carries the oracle's cached tokens per request; loss_by_reason.py sums the loss by reason).
# From the repository root, with build/ at the commit named.
set -u
d=bench/results/runs/2026-12-06-s10-routed
k=build/cli/kvcascade
tag=${1:-after}
for s in 1 2 3; do
  $k bench routing --sim-preset cpu-llama3-8b --replicas 16 --requests 5000 --mix rl --rate 70 \
    --seed $s --policy kvcascade --no-progress > "$d/$tag-cpu-rl-s$s.txt" 2>&1
done
mkdir -p /tmp/decisions
$k bench routing --sim-preset cpu-llama3-8b --replicas 16 --requests 5000 --mix rl --rate 70 \
  --seed 2 --policy kvcascade --decisions /tmp/decisions --no-progress > /dev/null 2>&1
python3 "$d/loss_by_reason.py" /tmp/decisions/*.tsv > "$d/$tag-cpu-rl-s2-loss-by-reason.txt"
