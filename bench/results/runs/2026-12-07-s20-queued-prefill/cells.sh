#!/usr/bin/env bash
# Twentieth session: cells of issue 28 §1's target table (runs/2026-12-06-s10-targets/run.sh) with
# kvcascade alone, after the replicas' queued_prefill_tokens left out a waiting prompt's cached
# prefix, on the 2-core VM, nothing else running; the bounds come from the baselines' runs in
# runs/2026-12-06-s11-lead1/table.md (their code is not changed). From the repository root.
set -u
d=bench/results/runs/2026-12-07-s20-queued-prefill
k=build/cli/kvcascade
run() {  # name preset mix rate seed
  $k bench routing --sim-preset "$2" --replicas 16 --requests 5000 --mix "$3" --rate "$4" \
    --seed "$5" --policy kvcascade --out "$d/$1-s$5-kvcascade.json" 2>&1 | grep -v '^  \[' \
    > "$d/$1-s$5-kvcascade.txt"
}
if [ "${PART:-1}" = 1 ]; then
  run cpu-chat cpu-llama3-8b chat 150 1
  run h200-rl h200-llama3-8b rl 100 1
  run cpu-rl cpu-llama3-8b rl 70 1
  run cpu-chat cpu-llama3-8b chat 150 2
  exit 0
fi
if [ "${PART:-1}" = 3 ]; then
  run a10g-rl a10g-llama3-8b rl 20 1
  run a10g-mixed a10g-llama3-8b mixed 20 1
  run a10g-chat a10g-llama3-8b chat 40 1
  exit 0
fi
# PART=2: the rest.
run h200-mixed h200-llama3-8b mixed 100 1
run h200-chat h200-llama3-8b chat 200 1
run cpu-mixed cpu-llama3-8b mixed 70 1
# and the CPU chat cell with the baselines in the same invocation (bounds of this session):
$k bench routing --sim-preset cpu-llama3-8b --replicas 16 --requests 5000 --mix chat --rate 150 \
  --seed 1 --policy kvcascade sglang_cache_aware consistent_hash --out "$d/cpu-chat-s1.json" 2>&1 |
  grep -v '^  \[' > "$d/cpu-chat-s1.txt"
