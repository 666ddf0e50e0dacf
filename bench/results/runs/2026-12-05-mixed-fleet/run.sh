#!/bin/bash
# The mixed fleet of bench/results/routing-profiles.md ("Mixed fleet"): 8 H200 + 8 A10G sim
# replicas (replica i gets the i mod 2-th preset), 5,000 requests per mix, seed 1.
# tok-*: the kvcascade policy with costs in tokens (KvCascadePolicyConfig::costs_by_step_model
# off; made with a build that read an environment switch for it, since removed);
# sec-*: the defaults (costs in each replica's own time) beside SGLang's rule and consistent hashing.
P=h200-llama3-8b,a10g-llama3-8b
for mr in chat:110 mixed:60 rl:60; do
  m=${mr%:*}; r=${mr#*:}
  build/cli/kvcascade bench routing --sim-preset $P --replicas 16 --requests 5000 --mix $m \
      --rate $r --policy kvcascade sglang_cache_aware consistent_hash --no-progress \
      --out sec-$m.json > sec-$m.txt 2>&1
done
