#!/usr/bin/env bash
# Twenty-third session: issue 28 §1's real-CPU-replica comparison with the work bound at 1.05x the
# mean (the default since this session), as ../2026-12-06-s12-real-cpu/run.sh: 4 tiny-model CPU
# replicas, 200 requests of the mixed mix at 0.1 requests/s, seed 2, three policies, nothing else
# running on the 2-core VM. From the repository root.
d=bench/results/runs/2026-12-07-s23-real-cpu
build/cli/kvcascade bench routing --backend cpu --replicas 4 --requests 200 --mix mixed \
  --rate 0.1 --seed 2 --policy kvcascade --policy sglang_cache_aware --policy consistent_hash \
  --out $d/out.json > $d/out.txt 2>&1
