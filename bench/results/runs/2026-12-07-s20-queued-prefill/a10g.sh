#!/usr/bin/env bash
# Twentieth session: the A10G Mooncake row (32 GB host tier, as runs/2026-12-06-s19-host-tier)
# after the replicas' queued_prefill_tokens left out a waiting prompt's cached prefix
# (replica/core/scheduler.cc counts). kvcascade alone, RUNS replays in a row. Input as
# ../2026-12-06-s10-mooncake/run.sh ($MOONCAKE: hiverge/dynamo's mooncake_trace.jsonl, sha256
# 42af0f9a...). From the repository root, on the 2-core VM, nothing else running. Runs FIRST
# (default 1) to RUNS (default 3): this session ran RUNS=3, then FIRST=4 RUNS=6.
set -u
d=bench/results/runs/2026-12-07-s20-queued-prefill
k=build/cli/kvcascade
[ -f /tmp/mooncake-x1.jsonl ] || python3 bench/mooncake_trace.py "$MOONCAKE" /tmp/mooncake-x1.jsonl --time-scale 1
for i in $(seq "${FIRST:-1}" "${RUNS:-3}"); do
  $k bench routing --sim-preset a10g-llama3-8b --replicas 16 --trace /tmp/mooncake-x1.jsonl \
    --policy kvcascade --kv-host-memory-gb 32 --out "$d/a10g-x1-host32-run$i.json" 2>&1 |
    grep -v '^  \[' > "$d/a10g-x1-host32-run$i.txt"
done
