#!/usr/bin/env bash
# Fourteenth session: cuBLASLt's candidates timed per decode shape (kernels/cuda/gemm.h
# Gemm::set_tuning, on by default in the CUDA backend). The new tests, then the seed rollout
# (cascade, graphs, --no-profile) with tuning and with --no-gemm-tuning, bf16 and FP8 + FP8 KV,
# then both CUDA test binaries whole. Run after bash bench/pack_gpu_bin.sh, carry gpu-bin:
#   OUT=... bash bench/results/runs/2026-12-06-s14-gemm-tuning/call.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 60 gpu-bin/kernels_cuda_test --gtest_filter='*GemmTuning*' >"$OUT/tuning_test.txt" 2>&1
tail -3 "$OUT/tuning_test.txt"
engine() {  # name, then bench engine's flags
  local name=$1
  shift
  SECONDS=0
  timeout 150 gpu-bin/kvcascade bench engine --attention cascade --graphs on --no-profile "$@" \
    >"$OUT/engine-$name.txt" 2>&1
  echo "== $name ($SECONDS s)"
  grep -A7 "  S  steps" "$OUT/engine-$name.txt" | grep -v "engine:"
  grep "rollout:" "$OUT/engine-$name.txt"
  sed -n '/^GEMM tuning/,/^$/p' "$OUT/engine-$name.txt"
}
engine bf16-tuned
engine bf16-untuned --no-gemm-tuning
engine fp8kv8-tuned --quantization fp8 --kv-cache-dtype fp8
engine fp8kv8-untuned --quantization fp8 --kv-cache-dtype fp8 --no-gemm-tuning
timeout 150 gpu-bin/kernels_cuda_test --gtest_brief=1 >"$OUT/kernels_cuda_test.txt" 2>&1
tail -3 "$OUT/kernels_cuda_test.txt"
timeout 150 gpu-bin/replica_cuda_test --gtest_brief=1 >"$OUT/replica_cuda_test.txt" 2>&1
tail -4 "$OUT/replica_cuda_test.txt"
