#!/usr/bin/env bash
# Seventeenth session: the replicas' insertion by reuse against LRU alone on a synthetic mix (the
# CPU profile's chat mix, the §1 cell closest to the 95% line), one binary, alternating.
set -u
d=bench/results/runs/2026-12-06-s17-mooncake-min
k=build/cli/kvcascade
for run in ${RUNS:-1}; do for rate in 0 0.1; do
  $k bench routing --sim-preset cpu-llama3-8b --replicas 16 --requests 1500 --mix chat --rate 150 \
    --policy kvcascade --kv-cold-reuse-rate $rate --out "$d/chat-cpu-rate$rate-run$run.json" \
    > "$d/chat-cpu-rate$rate-run$run.txt" 2>&1
done; done
