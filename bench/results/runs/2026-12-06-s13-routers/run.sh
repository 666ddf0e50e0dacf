#!/usr/bin/env bash
# Thirteenth session: issue 28 §2, one router against four measured without the twelfth
# session's invocation effect: every replay in an invocation of its own (`--routers 1` or
# `--routers 4` alone), alternating, six of each; H200 rl mix, seed 1, 5,000 requests, 16 sim
# replicas, policy kvcascade. From the repository root; only a code-reading helper ran beside it.
set -u
d=bench/results/runs/2026-12-06-s13-routers
k=build/cli/kvcascade
for i in 1 2 3 4 5 6; do
  for n in 1 4; do
    $k bench routing --replicas 16 --requests 5000 --mix rl --seed 1 --policy kvcascade \
      --routers $n > "$d/rl-r$n-$i.txt" 2>&1
    echo "run $i routers $n: $(grep -E '^rl +kvcascade' "$d/rl-r$n-$i.txt" | awk '{print $5, $6, $7}')"
  done
done | tee "$d/summary.txt"
