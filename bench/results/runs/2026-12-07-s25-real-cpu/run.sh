#!/usr/bin/env bash
# Twenty-fifth session: issue 28 §1's real-CPU-replica comparison after the holders' rule
# (ca12b25: a replica holding the longest match keeps it while under the bounds; work bound's
# slack 2), as ../2026-12-07-s23-real-cpu/run.sh: 4 tiny-model CPU replicas, 200 requests of the
# mixed mix at 0.1 requests/s, seed 2, three policies, nothing else running on the 2-core VM.
# From the repository root; RUN names the output (out, out2, ...).
d=bench/results/runs/2026-12-07-s25-real-cpu
run=${RUN:-out}
build/cli/kvcascade bench routing --backend cpu --replicas 4 --requests 200 --mix mixed \
  --rate 0.1 --seed 2 --policy kvcascade --policy sglang_cache_aware --policy consistent_hash \
  --out $d/$run.json > $d/$run.txt 2>&1
