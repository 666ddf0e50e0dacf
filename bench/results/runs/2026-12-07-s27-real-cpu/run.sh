#!/usr/bin/env bash
# Twenty-seventh session: issue 28 §1's real-CPU-replica comparison at ae10301 (the step-model
# fit's reference error, 1939118's rule for a withheld figure), as ../2026-12-07-s25-real-cpu/run.sh:
# 4 tiny-model CPU replicas, 200 requests of the mixed mix at 0.1 requests/s, seed 2, three
# policies, nothing else running on the 2-core VM. From the repository root; RUN names the output.
d=bench/results/runs/2026-12-07-s27-real-cpu
run=${RUN:-out}
build/cli/kvcascade bench routing --backend cpu --replicas 4 --requests 200 --mix mixed \
  --rate 0.1 --seed 2 --policy kvcascade --policy sglang_cache_aware --policy consistent_hash \
  --out $d/$run.json > $d/$run.txt 2>&1
