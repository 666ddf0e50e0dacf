#!/usr/bin/env bash
# Fourteenth session, after the review's mends (GEMM tuning per row bucket, off on tensor-parallel
# ranks, its choice on both accumulate plans; the API's text options): both CUDA test binaries,
# then the seed rollout in bf16 and FP8 + FP8 KV (cascade, graphs, --no-profile) with the tuning
# report. Run after bash bench/pack_gpu_bin.sh, carry gpu-bin:
#   OUT=... bash bench/results/runs/2026-12-06-s14-review-gpu/call.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 gpu-bin/kernels_cuda_test --gtest_brief=1 >"$OUT/kernels_cuda_test.txt" 2>&1
tail -3 "$OUT/kernels_cuda_test.txt"
timeout 150 gpu-bin/replica_cuda_test --gtest_brief=1 >"$OUT/replica_cuda_test.txt" 2>&1
tail -4 "$OUT/replica_cuda_test.txt"
for mode in bf16 fp8kv8; do
  flags=""
  [ $mode = fp8kv8 ] && flags="--quantization fp8 --kv-cache-dtype fp8"
  timeout 150 gpu-bin/kvcascade bench engine --attention cascade --graphs on --no-profile $flags \
    >"$OUT/engine-$mode.txt" 2>&1
  echo "== $mode"
  grep -A7 "  S  steps" "$OUT/engine-$mode.txt" | grep -v "engine:"
  grep -m1 "rollout:.*decode" "$OUT/engine-$mode.txt"
  sed -n '/^GEMM tuning/,/^$/p' "$OUT/engine-$mode.txt"
done
