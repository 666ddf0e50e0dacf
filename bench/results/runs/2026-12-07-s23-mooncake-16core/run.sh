#!/usr/bin/env bash
# Twenty-third session: the Mooncake rows of issue 28 §1 on the 16 cores of a GPU host instead of
# the 2-core VM (where 16 sim replicas, the router and the load generator share two cores and the
# H200 row's balance moved from 1.14 to 1.47 between runs of one build). Committed code (20bb974),
# four replays at a time, each an invocation of its own. gpu-bin: kvcascade (stripped), its
# libraries, and the trace files mooncake-x1.jsonl / mooncake-x4.jsonl made by
# `python3 bench/mooncake_trace.py mooncake_trace.jsonl OUT --time-scale 1|4` (hiverge/dynamo's
# trace, sha256 42af0f9a...; see ../2026-12-06-s10-mooncake/run.sh). With gpu-bin carried:
#   OUT=... ROUNDS="a10g h200a h200b" bash bench/results/runs/2026-12-07-s23-mooncake-16core/run.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
k=gpu-bin/kvcascade
nproc
mkdir -p "$OUT"
a10g() {  # policy, tag
  timeout "${LIMIT:-330}" $k bench routing --sim-preset a10g-llama3-8b --replicas 16 --trace gpu-bin/mooncake-x1.jsonl \
    --policy "$1" --kv-host-memory-gb 32 --out "$OUT/a10g-x1-$1-$2.json" 2>&1 | grep -v '^  \[' >"$OUT/a10g-x1-$1-$2.txt"
}
h200() {
  timeout "${LIMIT:-330}" $k bench routing --sim-preset h200-llama3-8b --replicas 16 --trace gpu-bin/mooncake-x4.jsonl \
    --policy "$1" --out "$OUT/h200-x4-$1-$2.json" 2>&1 | grep -v '^  \[' >"$OUT/h200-x4-$1-$2.txt"
}
cpu() {
  timeout "${LIMIT:-330}" $k bench routing --sim-preset cpu-llama3-8b --replicas 16 --trace gpu-bin/mooncake-x1.jsonl \
    --policy "$1" --out "$OUT/cpu-x1-$1-$2.json" 2>&1 | grep -v '^  \[' >"$OUT/cpu-x1-$1-$2.txt"
}
SECONDS=0
for round in ${ROUNDS:-a10g h200a h200b}; do
  case $round in
    a10g) a10g kvcascade r1 & a10g kvcascade r2 & a10g sglang_cache_aware r1 & a10g consistent_hash r1 & ;;
    a10g2) a10g kvcascade r3 & a10g kvcascade r4 & a10g kvcascade r5 & a10g kvcascade r6 & ;;
    h200a) h200 kvcascade r1 & h200 kvcascade r2 & h200 kvcascade r3 & h200 sglang_cache_aware r1 & ;;
    h200b) h200 kvcascade r4 & h200 kvcascade r5 & h200 kvcascade r6 & h200 consistent_hash r1 & ;;
    h200c) h200 kvcascade r7 & h200 kvcascade r8 & h200 kvcascade r9 & h200 kvcascade r10 & ;;
    cpu) cpu kvcascade r1 & cpu kvcascade r2 & cpu sglang_cache_aware r1 & cpu consistent_hash r1 & ;;
  esac
  wait
  echo "round $round done at $SECONDS s"
done
for f in "$OUT"/*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^[^ ]+ +(kvcascade|sglang_cache_aware|consistent_hash) ' "$f" | head -1)"
done | tee "$OUT/summary.txt"
