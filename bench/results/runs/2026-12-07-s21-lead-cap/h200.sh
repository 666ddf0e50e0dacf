#!/usr/bin/env bash
# Twenty-first session: the H200 Mooncake row (4x arrivals, no host tier, kvcascade alone) with
# the temporary switches of a10g.sh set by the caller (KVC_EXP_QUEUED_UNCACHED, KVC_EXP_LEAD_CAP),
# runs FIRST..RUNS named by TAG. On the 2-core VM, nothing else running; from the repository root.
set -u
d=${DIR:-bench/results/runs/2026-12-07-s21-lead-cap}  # DIR: another folder for the outputs
[ -f /tmp/mooncake-x4.jsonl ] || python3 bench/mooncake_trace.py "$MOONCAKE" /tmp/mooncake-x4.jsonl --time-scale 4
for i in $(seq "${FIRST:-1}" "${RUNS:-2}"); do
  build/cli/kvcascade bench routing --sim-preset h200-llama3-8b --replicas 16 --trace /tmp/mooncake-x4.jsonl \
    --policy kvcascade --out "$d/h200-x4-$TAG-run$i.json" 2>&1 | grep -v '^  \[' > "$d/h200-x4-$TAG-run$i.txt"
done
