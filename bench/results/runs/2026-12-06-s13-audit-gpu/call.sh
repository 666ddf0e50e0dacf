#!/usr/bin/env bash
# Thirteenth session: the audit's fixes on the GPU host (the scheduler's admission of the prompt's
# partial block, the finiteness check before the CUDA backends' uploads, stop_token_ids): both
# CUDA test binaries, then the seed rollout with FP8 weights + FP8 KV (cascade, graphs,
# --no-profile) and bf16 to see the step unchanged. Run after bash bench/pack_gpu_bin.sh, carry
# gpu-bin: OUT=... bash bench/results/runs/2026-12-06-s13-audit-gpu/call.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 gpu-bin/kernels_cuda_test --gtest_brief=1 >"$OUT/kernels_cuda_test.txt" 2>&1
tail -3 "$OUT/kernels_cuda_test.txt"
timeout 200 gpu-bin/replica_cuda_test --gtest_brief=1 >"$OUT/replica_cuda_test.txt" 2>&1
tail -4 "$OUT/replica_cuda_test.txt"
timeout 120 gpu-bin/kvcascade bench engine --quantization fp8 --kv-cache-dtype fp8 \
  --attention cascade --graphs on --no-profile >"$OUT/engine-fp8kv8.txt" 2>&1
grep -A7 "  S  steps" "$OUT/engine-fp8kv8.txt"; grep "rollout:" "$OUT/engine-fp8kv8.txt"
timeout 120 gpu-bin/kvcascade bench engine --attention cascade --graphs on --no-profile \
  >"$OUT/engine-bf16.txt" 2>&1
grep -A7 "  S  steps" "$OUT/engine-bf16.txt"; grep "rollout:" "$OUT/engine-bf16.txt"
