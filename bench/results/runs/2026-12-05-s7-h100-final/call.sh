#!/usr/bin/env bash
# Session 7, call 5 (final build, 0f1ce52): the PyTorch anchor, bench engine FP8 + FP8 KV cascade
# twice (no profile) and bf16 cascade, each beside the anchor; bench_kernels --quick bf16 and fp8.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
OUT="$OUT" PYTHONUNBUFFERED=1 timeout 200 python3 anchor/torch_cascade_anchor.py >"$OUT/anchor.txt" 2>&1; tail -4 "$OUT/anchor.txt"
a=(); [ -f "$OUT/anchor.json" ] && a=(--anchor "$OUT/anchor.json")
for i in 1 2; do
  timeout 150 gpu-bin/kvcascade bench engine --quantization fp8 --kv-cache-dtype fp8 --attention cascade --graphs on --no-profile "${a[@]}" --out "$OUT/engine-fp8kv8-$i.json" >"$OUT/engine-fp8kv8-$i.txt" 2>&1
  grep -E "^ +(16|256|1024) +[0-9]|rollout:|^ +(16|256|1024) +[0-9.]+ +[0-9.]+ " "$OUT/engine-fp8kv8-$i.txt" | head -12
done
timeout 150 gpu-bin/kvcascade bench engine --attention cascade --graphs on --no-profile "${a[@]}" --out "$OUT/engine-bf16.json" >"$OUT/engine-bf16.txt" 2>&1
grep -E "^ +(16|256|1024) +[0-9]|rollout:" "$OUT/engine-bf16.txt" | head -12
for kv in bf16 fp8; do
  k=(); [ $kv = fp8 ] && k=(--kv-cache-dtype fp8)
  timeout 120 gpu-bin/bench_kernels --quick "${k[@]}" --out $OUT/kernels-$kv.json >$OUT/kernels-$kv.txt 2>&1
  echo "== $kv"; grep -E "^(seed|tree)" -A1 $OUT/kernels-$kv.txt | grep -v "^--" | cut -c1-200
done
