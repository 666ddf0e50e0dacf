#!/usr/bin/env bash
# Twenty-seventh session: the mixed fleet (8 H200 + 8 A10G sim replicas, chat@110, 5,000
# requests, seed 1) with its baselines in the same invocation on the 2-core VM (issue 28 §1: TTFT
# p90 <= 0.8x the better of sglang_cache_aware and consistent_hash), then kvcascade once more;
# nothing else running. From the repository root, with the build of the commit that adds this.
d=bench/results/runs/2026-12-07-s27-mixed-fleet-vm
build/cli/kvcascade bench routing --sim-preset h200-llama3-8b,a10g-llama3-8b --replicas 16 \
  --requests 5000 --mix chat --rate 110 --seed 1 \
  --policy kvcascade sglang_cache_aware consistent_hash --out $d/all.json 2>&1 |
  grep -v '^  \[' > $d/all.txt
build/cli/kvcascade bench routing --sim-preset h200-llama3-8b,a10g-llama3-8b --replicas 16 \
  --requests 5000 --mix chat --rate 110 --seed 1 --policy kvcascade --out $d/kv2.json 2>&1 |
  grep -v '^  \[' > $d/kv2.txt
