#!/bin/bash
# The mixed fleet of bench/results/routing-profiles.md ("Mixed fleet"): 8 H200 + 8 A10G sim
# replicas (replica i gets the (i mod 2)-th preset), 5,000 requests per mix, seed 1; the kvcascade
# policy with costs in each replica's own time (the default), with costs in tokens
# (kvcascade_tokens), SGLang's rule and consistent hashing. KVC: the kvcascade binary.
KVC=${KVC:-build/cli/kvcascade}
P=h200-llama3-8b,a10g-llama3-8b
for mr in chat:110 mixed:60 rl:60; do
  m=${mr%:*}; r=${mr#*:}
  $KVC bench routing --sim-preset $P --replicas 16 --requests 5000 --mix $m --rate $r \
      --policy kvcascade kvcascade_tokens sglang_cache_aware consistent_hash --no-progress \
      --out $m.json > $m.txt 2>&1
done
