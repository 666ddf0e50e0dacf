#!/usr/bin/env bash
# Tenth session: issue 28 §1's target table again after the routed index (625e90f: a prompt sent
# to a replica with KV events counts as held there until its events say so), stream interval 16:
# every profile and mix, 5,000 requests, three policies, seeds 1 and 2 (the A10G rows seed 1
# only: 25 minutes a seed), nothing else running on the 2-core VM. Run from the repository root: bash bench/results/runs/2026-12-06-s10-targets/run.sh
set -u
d=bench/results/runs/2026-12-06-s10-targets
k=build/cli/kvcascade
run() {  # name preset mix rate seed
  $k bench routing --sim-preset "$2" --replicas 16 --requests 5000 --mix "$3" --rate "$4" \
    --seed "$5" --policy kvcascade sglang_cache_aware consistent_hash --out "$d/$1-s$5.json" \
    > "$d/$1-s$5.txt" 2>&1
}
for seed in 1 2; do
  run h200-rl h200-llama3-8b rl 100 $seed
  run h200-mixed h200-llama3-8b mixed 100 $seed
  run h200-chat h200-llama3-8b chat 200 $seed
  if [ "$seed" = 1 ]; then
    run a10g-rl a10g-llama3-8b rl 20 $seed
    run a10g-mixed a10g-llama3-8b mixed 20 $seed
    run a10g-chat a10g-llama3-8b chat 40 $seed
  fi
  run cpu-rl cpu-llama3-8b rl 70 $seed
  run cpu-mixed cpu-llama3-8b mixed 70 $seed
  run cpu-chat cpu-llama3-8b chat 150 $seed
done
