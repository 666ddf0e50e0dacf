#!/usr/bin/env bash
# Twelfth session: issue 28 §2 (several routers) with the work bound's lead allowance at 1.0
# (a5f2560) and queued KV events (c38459f): the H200 profile's rl mix, 1 / 2 / 4 routers, seeds
# 1-3, and its chat and mixed mixes once; the CPU profile's rl mix, 1 and 4 routers, seeds 1-2.
# From the repository root, nothing else running.
set -u
d=bench/results/runs/2026-12-06-s12-routers
k=build/cli/kvcascade
for seed in 1 2 3; do
  $k bench routing --replicas 16 --requests 5000 --mix rl --seed $seed --policy kvcascade \
    --routers 1 --routers 2 --routers 4 > "$d/h200-rl-$seed.txt" 2>&1
done
for mix in chat mixed; do
  $k bench routing --replicas 16 --requests 5000 --mix $mix --seed 1 --policy kvcascade \
    --routers 1 --routers 2 --routers 4 > "$d/h200-$mix-1.txt" 2>&1
done
for seed in 1 2; do
  $k bench routing --sim-preset cpu-llama3-8b --replicas 16 --requests 5000 --mix rl --rate 70 \
    --seed $seed --policy kvcascade --routers 1 --routers 4 > "$d/cpu-rl-$seed.txt" 2>&1
done
