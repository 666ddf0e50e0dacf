#!/bin/bash
# Issue 28 §1 target runs: 3 profiles x 3 mixes, 5,000 requests, kvcascade beside
# sglang_cache_aware and consistent_hash, seed $SEED (default 1).
cd /tmp/targets
SEED=${SEED:-1}
for row in "h200-llama3-8b chat 200" "h200-llama3-8b mixed 100" "h200-llama3-8b rl 100" \
           "a10g-llama3-8b chat 40" "a10g-llama3-8b mixed 20" "a10g-llama3-8b rl 20" \
           "cpu-llama3-8b chat 150" "cpu-llama3-8b mixed 70" "cpu-llama3-8b rl 70"; do
  set -- $row
  f=s$SEED-$1-$2
  /tmp/bx/kvc bench routing --sim-preset $1 --replicas 16 --requests 5000 --mix $2 --rate $3 \
    --seed $SEED --policy kvcascade sglang_cache_aware consistent_hash --no-progress \
    --out $f.json > $f.txt 2>&1
  echo "== $f $(date +%T)"; grep -E "^ *(kvcascade|sglang|consistent)" $f.txt | head -3
done
