#!/usr/bin/env bash
# Tenth session: issue 28 §2 (several routers) after the routed index (625e90f: each router counts
# the prompts it sent as held where it sent them until their KV events come; other routers do not
# see them): the rl mix five times, chat and mixed once, 1 / 2 / 4 routers each, stream interval
# 16, nothing else running. From the repository root.
set -u
d=bench/results/runs/2026-12-06-s10-routers
k=build/cli/kvcascade
for i in 1 2 3 4 5; do
  $k bench routing --replicas 16 --requests 5000 --mix rl --policy kvcascade \
    --routers 1 --routers 2 --routers 4 > "$d/rl-$i.txt" 2>&1
done
$k bench routing --replicas 16 --requests 5000 --mix chat --mix mixed --policy kvcascade \
  --routers 1 --routers 2 --routers 4 > "$d/chat-mixed.txt" 2>&1
