#!/usr/bin/env bash
# Eighth session: issue 28 §1's target rows again on the 2-core VM with nothing else running.
# H200 profile (the default sim preset), at 4cbeb4e:
kvcascade bench routing --replicas 16 --requests 5000 --mix rl --rate 100 --seed 2 \
  --policy kvcascade sglang_cache_aware consistent_hash > h200rl2.txt 2>&1
kvcascade bench routing --replicas 16 --requests 5000 --mix rl --rate 100 --seed 1 \
  --policy kvcascade sglang_cache_aware consistent_hash > h200rl1.txt 2>&1
kvcascade bench routing --replicas 16 --requests 5000 --mix chat --rate 200 --seed 1 \
  --policy kvcascade sglang_cache_aware consistent_hash > h200chat1.txt 2>&1
kvcascade bench routing --replicas 16 --requests 5000 --mix mixed --rate 100 --seed 1 \
  --policy kvcascade sglang_cache_aware consistent_hash > h200mixed1.txt 2>&1
# CPU profile, rl row, at b321afc (before the tie key): kvcascade alone (cpu1, cpu2 = seeds 1, 2)
# and with the two baselines (cpu3_1, cpu3_2):
kvcascade bench routing --sim-preset cpu-llama3-8b --replicas 16 --requests 5000 --mix rl \
  --rate 70 --seed S --policy kvcascade [sglang_cache_aware consistent_hash]
# The same rl row before the idle group wait (kvc-new = b3b800b's build, kvc-idle = 4cbeb4e's):
kvc-new bench routing --replicas 16 --requests 5000 --mix rl --rate 100 --seed 1 \
  --policy kvcascade sglang_cache_aware > preidle-rl1.txt 2>&1
for i in 1 2; do for v in new idle; do
  kvc-$v bench routing --replicas 16 --requests 5000 --mix rl --rate 100 --seed 1 \
    --policy kvcascade > pi-$v-$i.txt 2>&1
done; done
# With --decisions (now with each request's TTFT): the *.tsv.gz files (gzipped after).
kvcascade bench routing --replicas 16 --requests 5000 --mix rl --rate 100 --seed 1 \
  --policy kvcascade sglang_cache_aware --decisions .
