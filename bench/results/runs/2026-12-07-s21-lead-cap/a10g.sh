#!/usr/bin/env bash
# Twenty-first session: the A10G Mooncake row (32 GB host tier) with the replicas' queued prefill
# counted without the cached prefix and the work bound's lead allowance capped at CAP mean
# requests (temporary switches KVC_EXP_QUEUED_UNCACHED, KVC_EXP_LEAD_CAP while measuring; see
# README.md for what was kept). kvcascade alone, runs FIRST..RUNS. Input as
# ../2026-12-06-s10-mooncake/run.sh ($MOONCAKE: hiverge/dynamo's mooncake_trace.jsonl, sha256
# 42af0f9a...). From the repository root, on the 2-core VM, nothing else running.
set -u
d=${DIR:-bench/results/runs/2026-12-07-s21-lead-cap}  # DIR: another folder for the outputs
k=build/cli/kvcascade
tag=${TAG:-cap${CAP:-0}}
[ -f /tmp/mooncake-x1.jsonl ] || python3 bench/mooncake_trace.py "$MOONCAKE" /tmp/mooncake-x1.jsonl --time-scale 1
for i in $(seq "${FIRST:-1}" "${RUNS:-3}"); do
  $k bench routing --sim-preset a10g-llama3-8b --replicas 16 --trace /tmp/mooncake-x1.jsonl \
    --policy kvcascade --kv-host-memory-gb 32 --out "$d/a10g-x1-$tag-run$i.json" 2>&1 |
    grep -v '^  \[' > "$d/a10g-x1-$tag-run$i.txt"
done
