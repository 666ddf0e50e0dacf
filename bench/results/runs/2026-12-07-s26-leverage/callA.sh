#!/usr/bin/env bash
# Twenty-sixth session, device call A (an H100 host's 16 cores): the Mooncake rows with the
# committed build before the step-model leverage (gpu-bin/kvcascade-base, beae173) and with it
# (gpu-bin/kvcascade), alternating in the same rounds. gpu-bin: both binaries stripped, the shared
# libraries of bench/pack_gpu_bin.sh and the gzip'd Mooncake traces (bench/mooncake_trace.py
# --time-scale 1 and 4). Rounds 1 and 2: the A10G row, two runs of each build, with --decisions;
# round 3: the H200 row, two of each.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
gunzip -k gpu-bin/mooncake-x1.jsonl.gz gpu-bin/mooncake-x4.jsonl.gz
bin() { [ "$1" = base ] && echo gpu-bin/kvcascade-base || echo gpu-bin/kvcascade; }
a10g() {  # round build run
  local tag=$2-r$3
  mkdir -p "$OUT/$1/dec-$tag"
  timeout 300 "$(bin "$2")" bench routing --sim-preset a10g-llama3-8b --replicas 16 \
    --trace gpu-bin/mooncake-x1.jsonl --policy kvcascade --kv-host-memory-gb 32 \
    --decisions "$OUT/$1/dec-$tag" --out "$OUT/$1/a10g-$tag.json" 2>&1 |
    grep -v '^  \[' >"$OUT/$1/a10g-$tag.txt"
}
h200() {
  local tag=$2-r$3
  timeout 150 "$(bin "$2")" bench routing --sim-preset h200-llama3-8b --replicas 16 \
    --trace gpu-bin/mooncake-x4.jsonl --policy kvcascade \
    --out "$OUT/$1/h200-$tag.json" 2>&1 | grep -v '^  \[' >"$OUT/$1/h200-$tag.txt"
}
pack() {
  for f in "$OUT/$1"/*.txt; do
    echo "$1/$(basename "$f" .txt): $(grep -E '^[^ ]+ +kvcascade ' "$f" | head -1)"
  done | tee -a "$OUT/summary-a.txt"
  tar czf "$OUT/$1.tar.gz" -C "$OUT" "$1" && rm -rf "${OUT:?}/$1"
}
mkdir -p "$OUT/a1" "$OUT/a2" "$OUT/a3"
a10g a1 base 1 & a10g a1 new 1 & a10g a1 base 2 & a10g a1 new 2 &
wait
stamp "round 1 done"
pack a1
a10g a2 new 3 & a10g a2 base 3 & a10g a2 new 4 & a10g a2 base 4 &
wait
stamp "round 2 done"
pack a2
h200 a3 base 1 & h200 a3 new 1 & h200 a3 base 2 & h200 a3 new 2 &
wait
stamp "round 3 done"
pack a3
