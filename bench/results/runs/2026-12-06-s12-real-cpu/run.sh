#!/usr/bin/env bash
# Twelfth session: issue 28 §1's real-CPU-replica comparison at ff2cd5b (lead allowance 1.0, queued events),
# as the ninth and tenth sessions ran it: 4 tiny-model CPU replicas, 200 requests of the mixed mix at 0.1
# requests/s, seed 2, three policies, stream interval 16, nothing else running. From the
# repository root.
build/cli/kvcascade bench routing --backend cpu --replicas 4 --requests 200 --mix mixed \
  --rate 0.1 --seed 2 --policy kvcascade --policy sglang_cache_aware --policy consistent_hash \
  --out bench/results/runs/2026-12-06-s12-real-cpu/out.json \
  > bench/results/runs/2026-12-06-s12-real-cpu/out.txt 2>&1
