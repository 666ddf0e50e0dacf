#!/usr/bin/env bash
# Twentieth session, on the GPU host's 16 CPU cores: issue 28 §1's target table (the tenth
# session's cells: runs/2026-12-06-s10-targets/run.sh, seed 1) after the replicas'
# queued_prefill_tokens left out a waiting prompt's cached prefix. Three cells at a time; each
# cell one `bench routing` invocation with the three policies. Carry gpu-bin
# (bench/pack_gpu_bin.sh). CELLS: which cells (default all nine); outputs under $OUT/table.
# Table: python3 bench/routing_target_table.py $OUT/table
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
k=gpu-bin/kvcascade
mkdir -p "$OUT/table"
run() {  # name preset mix rate seed
  timeout 500 $k bench routing --sim-preset "$2" --replicas 16 --requests 5000 --mix "$3" \
    --rate "$4" --seed "$5" --policy kvcascade sglang_cache_aware consistent_hash \
    --out "$OUT/table/$1-s$5.json" 2>&1 | grep -v '^  \[' > "$OUT/table/$1-s$5.txt"
}
declare -A cell=(
  [h200-rl]="h200-llama3-8b rl 100" [h200-mixed]="h200-llama3-8b mixed 100"
  [h200-chat]="h200-llama3-8b chat 200" [a10g-rl]="a10g-llama3-8b rl 20"
  [a10g-mixed]="a10g-llama3-8b mixed 20" [a10g-chat]="a10g-llama3-8b chat 40"
  [cpu-rl]="cpu-llama3-8b rl 70" [cpu-mixed]="cpu-llama3-8b mixed 70"
  [cpu-chat]="cpu-llama3-8b chat 150")
i=0
for name in ${CELLS:-h200-rl h200-mixed h200-chat cpu-rl cpu-mixed cpu-chat a10g-rl a10g-mixed a10g-chat}; do
  run "$name" ${cell[$name]} 1 &
  i=$((i + 1)); [ $((i % 3)) = 0 ] && wait
done
wait
python3 bench/routing_target_table.py "$OUT/table"
