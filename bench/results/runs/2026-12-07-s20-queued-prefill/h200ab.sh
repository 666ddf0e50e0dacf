#!/usr/bin/env bash
# Twentieth session: H200 Mooncake 4x, kvcascade alone, alternating a temporary build's
# KVC_OLD_QUEUED=1 (waiting prompts whole, as before and again after ff45a34) and the change of
# 76e8a38. The switch was in a temporary build (589b846 + the switch), not committed.
cd "$(dirname "$0")/../../../.."  # the repository root
d=bench/results/runs/2026-12-07-s20-queued-prefill
for i in 1 2; do
  for v in old new; do
    if [ $v = old ]; then export KVC_OLD_QUEUED=1; else unset KVC_OLD_QUEUED; fi
    build/cli/kvcascade bench routing --sim-preset h200-llama3-8b --replicas 16 --trace /tmp/mooncake-x4.jsonl \
      --policy kvcascade --out $d/moon-h200-x4-ab-$v-$i.json 2>&1 | grep -v '^  \[' > $d/moon-h200-x4-ab-$v-$i.txt
  done
done
