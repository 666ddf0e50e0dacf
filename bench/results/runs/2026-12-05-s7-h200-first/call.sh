#!/usr/bin/env bash
# Session 7, call 1: validate the unification + fb93219 on a GPU; FP8 engine with anchor.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
timeout 240 gpu-bin/kernels_cuda_test --gtest_brief=1 >"$OUT/kernels_cuda_test.txt" 2>&1; tail -3 "$OUT/kernels_cuda_test.txt"
timeout 240 gpu-bin/replica_cuda_test --gtest_brief=1 >"$OUT/replica_cuda_test.txt" 2>&1; tail -3 "$OUT/replica_cuda_test.txt"
OUT=$OUT/tp bash bench/gpu_tp.sh tests 2>&1 | tail -12
OUT="$OUT" PYTHONUNBUFFERED=1 timeout 200 python3 anchor/torch_cascade_anchor.py >"$OUT/anchor.txt" 2>&1; tail -4 "$OUT/anchor.txt"
a=(); [ -f "$OUT/anchor.json" ] && a=(--anchor "$OUT/anchor.json")
timeout 200 gpu-bin/kvcascade bench engine --quantization fp8 --kv-cache-dtype fp8 --attention cascade --graphs on "${a[@]}" --out "$OUT/engine-fp8kv8.json" >"$OUT/engine-fp8kv8.txt" 2>&1
grep -v "^$" "$OUT/engine-fp8kv8.txt" | head -80
