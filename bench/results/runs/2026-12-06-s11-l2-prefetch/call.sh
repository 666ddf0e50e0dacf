#!/usr/bin/env bash
# Session 11: the decode attention reading the next GEMMs' weights ahead into L2
# (llama.h set_l2_prefetch_bytes; bench engine --l2-prefetch-mb). The new tests, then the seed
# rollout's steps (--no-profile) at several prefetch sizes, FP8 weights + FP8 KV and bf16, all in
# one call on one card. Run: OUT=... bash bench/results/runs/2026-12-06-s11-l2-prefetch/call.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
timeout 100 gpu-bin/kernels_cuda_test --gtest_brief=1 --gtest_filter='*RoutesAgree*' \
  >"$OUT/kernels_cuda_test.txt" 2>&1
tail -2 "$OUT/kernels_cuda_test.txt"
timeout 100 gpu-bin/replica_cuda_test --gtest_brief=1 --gtest_filter='*L2Prefetch*:*Graphs*' \
  >"$OUT/replica_cuda_test.txt" 2>&1
tail -2 "$OUT/replica_cuda_test.txt"
for mb in 0 16 32 40 0; do
  timeout 100 gpu-bin/kvcascade bench engine --quantization fp8 --kv-cache-dtype fp8 \
    --attention cascade --graphs on --no-profile --l2-prefetch-mb $mb \
    >"$OUT/fp8kv8-l2-$mb.txt" 2>&1
  echo "fp8+kv8 l2 $mb MiB"; grep -A4 "  S  steps" "$OUT/fp8kv8-l2-$mb.txt" | tail -3
  grep "rollout:" "$OUT/fp8kv8-l2-$mb.txt" | tail -1
done
for mb in 0 32 48; do
  timeout 100 gpu-bin/kvcascade bench engine --attention cascade --graphs on --no-profile \
    --l2-prefetch-mb $mb >"$OUT/bf16-l2-$mb.txt" 2>&1
  echo "bf16 l2 $mb MiB"; grep -A4 "  S  steps" "$OUT/bf16-l2-$mb.txt" | tail -3
  grep "rollout:" "$OUT/bf16-l2-$mb.txt" | tail -1
done
# Per-operation device times with 32 MiB read ahead (o_proj and gate_up_proj should shrink).
timeout 100 gpu-bin/kvcascade bench engine --quantization fp8 --kv-cache-dtype fp8 \
  --attention cascade --graphs on --l2-prefetch-mb 32 >"$OUT/fp8kv8-l2-32-profile.txt" 2>&1
grep -E "^S=|cascade_decode|o_proj|gate_up_proj" "$OUT/fp8kv8-l2-32-profile.txt"
